//! The bench's UCX phases (`ucx` feature): (d)/(du) stream mode over `--ucx-tls`, verified and
//! not; (gt) get mode over TCP, verified; (g)/(gu) get mode over `--ucx-shm-tls` (leases
//! staged in UCX shared memory, so each get is one copy by the reader), verified and not.

use std::sync::Arc;

use kvfabric_store::BlockId;

use super::ns;
use super::opts::Opts;
use super::phases::{measure, transport_phase, verified_then_unverified, Tally, Verifying};
use crate::{BlockReceiver, MemorySource, PeerAddr, Transport, UcxTransport};

/// The client's UCX transports, their peers and what each phase has measured.
pub(crate) struct UcxPhases {
    stream: UcxTransport,
    get_tcp: UcxTransport,
    get_shm: UcxTransport,
    peer: PeerAddr,
    shm_peer: PeerAddr,
    /// Fetches in flight in stream mode (`--inflight`) and in get mode (`--get-inflight`).
    inflight: usize,
    get_inflight: usize,
    d: Tally,
    du: Tally,
    gt: Tally,
    g: Tally,
    gu: Tally,
}

impl UcxPhases {
    /// Binds the three client transports; `addr` serves over `--ucx-tls` (in place), `shm_addr`
    /// over `--ucx-shm-tls` (staged).
    pub(crate) async fn bind(opts: &Opts, addr: &str, shm_addr: &str) -> anyhow::Result<Self> {
        let lo = "127.0.0.1:0".parse()?;
        let bind = |config| async move {
            UcxTransport::bind(config, "node2", lo, Arc::new(MemorySource::new())).await
        };
        Ok(UcxPhases {
            stream: bind(opts.tuned()).await?,
            get_tcp: bind(opts.ucx_get("tcp", false)).await?,
            get_shm: bind(opts.ucx_get(&opts.ucx_shm_tls, true)).await?,
            peer: PeerAddr::new("node1", addr.parse()?),
            shm_peer: PeerAddr::new("node1", shm_addr.parse()?),
            inflight: opts.inflight,
            get_inflight: opts.get_inflight,
            d: Tally::default(),
            du: Tally::default(),
            gt: Tally::default(),
            g: Tally::default(),
            gu: Tally::default(),
        })
    }

    /// Each client transport, its peer and its fetches in flight.
    fn each(&self) -> [(&UcxTransport, &PeerAddr, usize); 3] {
        [
            (&self.stream, &self.peer, self.inflight),
            (&self.get_tcp, &self.peer, self.get_inflight),
            (&self.get_shm, &self.shm_peer, self.get_inflight),
        ]
    }

    /// One verified round over each transport: connections, wire-up, staging regions.
    pub(crate) async fn warm_up(&self, ids: &[BlockId], count: usize) -> anyhow::Result<()> {
        for (client, peer, inflight) in self.each() {
            transport_phase(client, peer, ids, count, inflight, |id| {
                Verifying(BlockReceiver::new(ns(), id))
            })
            .await?;
        }
        Ok(())
    }

    /// One repetition of every UCX phase.
    pub(crate) async fn repetition(
        &mut self,
        server_pid: u32,
        ids: &[BlockId],
        count: usize,
    ) -> anyhow::Result<()> {
        let (stream, peer, inflight) = (&self.stream, &self.peer, self.inflight);
        verified_then_unverified(
            server_pid,
            stream,
            peer,
            ids,
            count,
            inflight,
            &mut self.d,
            &mut self.du,
        )
        .await?;
        measure(
            server_pid,
            &mut self.gt,
            transport_phase(&self.get_tcp, peer, ids, count, self.get_inflight, |id| {
                Verifying(BlockReceiver::new(ns(), id))
            }),
        )
        .await?;
        let (shm, shm_peer) = (&self.get_shm, &self.shm_peer);
        verified_then_unverified(
            server_pid,
            shm,
            shm_peer,
            ids,
            count,
            self.get_inflight,
            &mut self.g,
            &mut self.gu,
        )
        .await
    }

    /// Fails if any UCX fetch failed; the UCX phases' codes, labels and tallies.
    pub(crate) fn report(&self) -> anyhow::Result<[(&'static str, &'static str, Tally); 5]> {
        for (client, _, _) in self.each() {
            let c = client.counters();
            anyhow::ensure!(
                c.verify_failures == 0 && c.fetches_failed == 0,
                "UCX fetch errors: {c:?}"
            );
        }
        Ok([
            ("d", "(d) ucx stream, verified", self.d),
            ("du", "(du) ucx stream, unverified", self.du),
            ("gt", "(gt) ucx get over tcp, verified", self.gt),
            ("g", "(g) ucx get, shared memory, verified", self.g),
            ("gu", "(gu) ucx get, shared memory, unverified", self.gu),
        ])
    }

    /// Closes the transports.
    pub(crate) async fn close(self) {
        for (client, _, _) in self.each() {
            client.close().await;
        }
    }
}
