//! The bench's measured phases: the TCP baseline, fetches over QUIC (and UCX where built) into
//! a verifying or a copying sink, and the tally of bytes, wall time and CPU of both processes.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::Context;
use kvfabric_store::BlockId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::{cpu, ns};
use crate::{BlockReceiver, PayloadSink, PeerAddr, QuicTransport, ReceiveError, TransportError};

/// Copies like the verifying receiver, without hashing: what verification costs. Like it,
/// it lends its buffer to one-sided reads (bytes land in place, once); it takes no whole
/// blocks at once (those are the verifying receiver's two-thread path), so a mapped read
/// into it is copied chunk by chunk on one thread.
pub(crate) struct CopySink(pub(crate) Vec<u8>);

impl PayloadSink for CopySink {
    type Output = Vec<u8>;
    fn begin(&mut self, length: u64) {
        self.0 = Vec::with_capacity(length as usize);
    }
    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        self.0.extend_from_slice(chunk);
        Ok(())
    }
    fn lend(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
    fn landed(&mut self, _bytes: &[u8]) -> Result<(), ReceiveError> {
        Ok(())
    }
    fn restore(&mut self, buf: Vec<u8>) {
        self.0 = buf;
    }
    fn finish(self) -> Result<Vec<u8>, ReceiveError> {
        Ok(self.0)
    }
}

/// Bytes moved, wall time and CPU seconds of both processes, summed over a phase's runs.
#[derive(Default, Clone, Copy)]
pub(crate) struct Tally {
    bytes: u64,
    wall: Duration,
    cpu_client: f64,
    cpu_server: f64,
}

impl Tally {
    /// Throughput in GB/s.
    pub(crate) fn gbps(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64() / 1e9
    }
    /// CPU seconds per GB moved: (client, server).
    pub(crate) fn cpu_per_gb(&self) -> (f64, f64) {
        let gb = self.bytes as f64 / 1e9;
        (self.cpu_client / gb, self.cpu_server / gb)
    }
}

/// Runs one phase and adds what it moved, took and cost to `tally`.
pub(crate) async fn measure<F: std::future::Future<Output = anyhow::Result<u64>>>(
    server_pid: u32,
    tally: &mut Tally,
    run: F,
) -> anyhow::Result<()> {
    let me = std::process::id();
    let (c0, s0) = (cpu::cpu_seconds(me), cpu::cpu_seconds(server_pid));
    let started = Instant::now();
    tally.bytes += run.await?;
    tally.wall += started.elapsed();
    tally.cpu_client += cpu::cpu_seconds(me) - c0;
    tally.cpu_server += cpu::cpu_seconds(server_pid) - s0;
    Ok(())
}

/// The baseline: `count` blocks over the plain TCP connection.
pub(crate) async fn tcp_phase(
    stream: &mut tokio::net::TcpStream,
    count: usize,
) -> anyhow::Result<u64> {
    stream.write_u32_le(count as u32).await?;
    let mut total = 0u64;
    for _ in 0..count {
        let len = stream.read_u64_le().await?;
        let mut buf = Vec::with_capacity(len as usize);
        (&mut *stream).take(len).read_to_end(&mut buf).await?;
        anyhow::ensure!(buf.len() as u64 == len, "short TCP block");
        total += len;
    }
    Ok(total)
}

/// Fetches `ids` round-robin `count` times with at most `inflight` in flight, dropping each
/// block as it completes; `fetch` starts one fetch of `id` into a sink.
pub(crate) async fn phase<S, F, Fut>(
    ids: &[BlockId],
    count: usize,
    inflight: usize,
    sink: impl Fn(BlockId) -> S,
    fetch: F,
) -> anyhow::Result<u64>
where
    S: PayloadSink + 'static,
    S::Output: AsRef<[u8]> + 'static,
    F: Fn(BlockId, S) -> Fut,
    Fut: std::future::Future<Output = Result<S::Output, TransportError>> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let (mut next, mut total) = (0usize, 0u64);
    loop {
        while next < count && tasks.len() < inflight {
            let id = ids[next % ids.len()];
            tasks.spawn(fetch(id, sink(id)));
            next += 1;
        }
        match tasks.join_next().await {
            Some(r) => total += r?.context("fetch")?.as_ref().len() as u64,
            None => return Ok(total),
        }
    }
}

/// A fetch in progress, boxed so that [`SinkFetch`] can name it.
pub(crate) type FetchFuture<T> = Pin<Box<dyn Future<Output = Result<T, TransportError>> + Send>>;

/// A transport the bench fetches through into any sink: QUIC, and UCX where built (their
/// inherent `fetch_into`).
pub(crate) trait SinkFetch: Clone + Send + Sync + 'static {
    /// Starts one fetch of `id` from `peer` into `sink`.
    fn fetch_sink<S>(&self, peer: PeerAddr, id: BlockId, sink: S) -> FetchFuture<S::Output>
    where
        S: PayloadSink + Send + 'static,
        S::Output: Send + 'static;
}

/// Implements [`SinkFetch`] through the type's inherent `fetch_into`.
macro_rules! sink_fetch_through_fetch_into {
    ($transport:ty) => {
        impl SinkFetch for $transport {
            fn fetch_sink<S>(&self, peer: PeerAddr, id: BlockId, sink: S) -> FetchFuture<S::Output>
            where
                S: PayloadSink + Send + 'static,
                S::Output: Send + 'static,
            {
                let client = self.clone();
                Box::pin(async move { client.fetch_into(&peer, ns(), id, sink).await })
            }
        }
    };
}

sink_fetch_through_fetch_into!(QuicTransport);
#[cfg(feature = "ucx")]
sink_fetch_through_fetch_into!(crate::UcxTransport);

/// [`phase`] over one transport.
pub(crate) async fn transport_phase<T, S>(
    client: &T,
    peer: &PeerAddr,
    ids: &[BlockId],
    count: usize,
    inflight: usize,
    sink: impl Fn(BlockId) -> S,
) -> anyhow::Result<u64>
where
    T: SinkFetch,
    S: PayloadSink + Send + 'static,
    S::Output: AsRef<[u8]> + Send + 'static,
{
    phase(ids, count, inflight, sink, |id, s| {
        client.fetch_sink(peer.clone(), id, s)
    })
    .await
}

/// One verified and one unverified phase of `count` fetches over `client`, added to
/// `verified` and `unverified`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn verified_then_unverified<T: SinkFetch>(
    server_pid: u32,
    client: &T,
    peer: &PeerAddr,
    ids: &[BlockId],
    count: usize,
    inflight: usize,
    verified: &mut Tally,
    unverified: &mut Tally,
) -> anyhow::Result<()> {
    measure(
        server_pid,
        verified,
        transport_phase(client, peer, ids, count, inflight, |id| {
            Verifying(BlockReceiver::new(ns(), id))
        }),
    )
    .await?;
    measure(
        server_pid,
        unverified,
        transport_phase(client, peer, ids, count, inflight, |_| CopySink(Vec::new())),
    )
    .await
}

/// A verified block, as bytes.
pub(crate) struct Verified(kvfabric_store::VerifiedBlock);
impl AsRef<[u8]> for Verified {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}
/// The production receive path: hashes while it copies, yields only a verified block.
pub(crate) struct Verifying(pub(crate) BlockReceiver);
impl PayloadSink for Verifying {
    type Output = Verified;
    fn begin(&mut self, length: u64) {
        self.0.begin(length)
    }
    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        self.0.push(chunk)
    }
    fn lend(&mut self) -> Vec<u8> {
        self.0.lend()
    }
    fn landed(&mut self, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.0.landed(bytes)
    }
    fn restore(&mut self, buf: Vec<u8>) {
        self.0.restore(buf)
    }
    unsafe fn fill_whole(
        &mut self,
        fill: &kvfabric_store::hash_parallel::Fill<'_, std::convert::Infallible>,
    ) -> bool {
        // SAFETY: forwarded from this method's contract on `fill`.
        unsafe { self.0.fill_whole(fill) }
    }
    fn finish(self) -> Result<Verified, ReceiveError> {
        self.0.finish().map(Verified)
    }
}
