//! [`QuicTransport`]: the default transport, on quinn with mutual TLS (rustls, ring).
//!
//! One UDP endpoint per node both serves (accepting connections from peers whose certificate
//! the cluster CA signed) and fetches (one pooled connection per peer, a bidirectional stream
//! per block, push or probe). The same endpoint carries the node's message channels (Raft,
//! control; [`crate::message`]): each is an ALPN of its own, so a peer has one connection per
//! channel and bulk block streams never queue behind a heartbeat, nor one behind them.
//! Submodules: [`tls`] (rustls configs), [`tuning`] (quinn configs and the socket),
//! [`coalesce`] (the socket that joins a connection's full batches into one send),
//! [`path`] (the rule that picks a connection's settings from its peer's address: loopback
//! or a network path),
//! [`errors`] (quinn errors to [`TransportError`], close codes), and the private client
//! (fetch; push, probe and messages in `exchange`) and server halves.

mod client;
pub mod coalesce;
pub mod errors;
mod exchange;
pub mod path;
mod server;
pub mod tls;
pub mod tuning;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::certs::NodeIdentity;
use crate::config::TransportConfig;
use crate::counters::{CountersSnapshot, TransportCounters};
use crate::error::TransportError;
use crate::message::{no_channel, Channel, MessageHandler, Messenger};
use crate::peer::PeerAddr;
use crate::receive::{BlockReceiver, PayloadSink};
use crate::source::BlockSource;
use crate::transport::{in_order_bounded, Transport, TransportFuture};

use client::Client;
use path::PathKind;
use server::Server;

/// How long [`QuicTransport::close`] waits for peers to acknowledge the close.
const CLOSE_WAIT_MS_MAX: u64 = 1_000;

/// The QUIC transport; cheap to clone (all clones share one endpoint).
#[derive(Clone)]
pub struct QuicTransport {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    server: Arc<Server>,
    local: PeerAddr,
    accept_task: JoinHandle<()>,
    /// What the joining socket sent (`quic.join_sends`).
    sends: Option<Arc<coalesce::CoalescingStats>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.client
            .endpoint
            .close(errors::CLOSE_SHUTDOWN, b"dropped");
    }
}

impl QuicTransport {
    /// Binds `listen` and starts serving `source` as `identity`; fetches use the same endpoint.
    /// Must run inside a tokio runtime.
    pub async fn bind(
        config: TransportConfig,
        identity: &NodeIdentity,
        listen: SocketAddr,
        source: Arc<dyn BlockSource>,
    ) -> Result<QuicTransport, TransportError> {
        QuicTransport::bind_with_channels(config, identity, listen, source, Vec::new()).await
    }

    /// [`QuicTransport::bind`], also carrying `channels` (their handlers are registered with
    /// [`Messenger::serve`]; until then their requests are refused).
    pub async fn bind_with_channels(
        config: TransportConfig,
        identity: &NodeIdentity,
        listen: SocketAddr,
        source: Arc<dyn BlockSource>,
        channels: Vec<Channel>,
    ) -> Result<QuicTransport, TransportError> {
        config.validate()?;
        let mut alpns: Vec<&[u8]> = vec![tls::ALPN];
        for c in &channels {
            if alpns.contains(&c.alpn) {
                return Err(TransportError::Config {
                    field: "channels",
                    reason: format!("expected distinct ALPNs, found {} twice", c.name()),
                });
            }
            alpns.push(c.alpn);
        }
        let socket = tuning::bind_socket(listen, &config)?;
        let starting = |e| TransportError::io(format!("starting the QUIC endpoint on {listen}"), e);
        let runtime = Arc::new(quinn::TokioRuntime);
        let mut socket = quinn::Runtime::wrap_udp_socket(&*runtime, socket).map_err(starting)?;
        let mut sends = None;
        if config.quic.join_sends {
            let joining = coalesce::Coalescing::new(socket);
            sends = Some(joining.stats());
            socket = joining;
        }
        let endpoint = quinn::Endpoint::new_with_abstract_socket(
            tuning::quinn_endpoint(&config, identity)?,
            Some(tuning::server_config(&config, identity, &alpns)?),
            socket,
            runtime,
        )
        .map_err(starting)?;
        let addr = endpoint
            .local_addr()
            .map_err(|e| TransportError::io("reading the bound address", e))?;
        let counters = Arc::new(TransportCounters::default());
        // Each connection's settings follow its path (`path`): one server config per kind.
        let path_servers = PathKind::ALL.map(|kind| {
            tuning::server_config(&path::config_for_path(&config, kind), identity, &alpns)
                .map(Arc::new)
        });
        let [loopback, network] = path_servers;
        let server = Arc::new(Server {
            path_configs: [loopback?, network?],
            connections: Arc::new(Semaphore::new(config.connections_max)),
            config: config.clone(),
            counters: counters.clone(),
            source,
            handlers: std::sync::RwLock::new(vec![None; channels.len()]),
            channels,
        });
        let accept_task = tokio::spawn(server.clone().accept_loop(endpoint.clone()));
        let mut client_configs = Vec::with_capacity(alpns.len());
        for a in &alpns {
            let [loopback, network] = PathKind::ALL.map(|kind| {
                tuning::client_config(&path::config_for_path(&config, kind), identity, a)
            });
            client_configs.push([loopback?, network?]);
        }
        let client = Client::new(endpoint, client_configs, config, counters);
        tracing::info!(node = identity.name(), %addr, "QUIC transport listening");
        Ok(QuicTransport {
            inner: Arc::new(Inner {
                client,
                server,
                local: PeerAddr::new(identity.name(), addr),
                accept_task,
                sends,
            }),
        })
    }

    /// The address the endpoint is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local.addr
    }

    /// quinn's statistics (path MTU, RTT, congestion window, packets lost) of the pooled
    /// connection to `peer`, if one is open: for metrics and tuning.
    pub fn connection_stats(&self, peer: &PeerAddr) -> Option<quinn::ConnectionStats> {
        self.inner.client.connection_stats(peer)
    }

    /// What this endpoint's socket sent, with `quic.join_sends` on: sends (one `sendmsg`
    /// each) and the datagrams in them.
    pub fn send_stats(&self) -> Option<(u64, u64)> {
        let s = self.inner.sends.as_ref()?;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        Some((load(&s.sends), load(&s.datagrams)))
    }

    /// Fetches one block from `peer` into any [`PayloadSink`]. [`Transport::fetch`] is this
    /// with the verifying [`BlockReceiver`]; other sinks (a bench's) yield no `VerifiedBlock`.
    pub async fn fetch_into<S: PayloadSink>(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
        sink: S,
    ) -> Result<S::Output, TransportError> {
        self.inner.client.fetch(peer, namespace, id, sink).await
    }

    /// Fetches `ids` from `peer` concurrently, each fetch on its own task (so receiving and
    /// hashing spread over cores), at most `fetches_in_flight_max` tasks at a time: a long id
    /// list never queues more than that, and no fetch spends its timeout waiting for a slot
    /// behind its own siblings. Results in the order of `ids`.
    pub async fn fetch_many_into<S, F>(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        ids: &[BlockId],
        make_sink: F,
    ) -> Vec<Result<S::Output, TransportError>>
    where
        S: PayloadSink + 'static,
        S::Output: 'static,
        F: Fn(BlockId) -> S,
    {
        let width = self.inner.client.config.fetches_in_flight_max;
        in_order_bounded(ids, width, |id| {
            let (this, peer, sink) = (self.clone(), peer.clone(), make_sink(id));
            async move { this.fetch_into(&peer, namespace, id, sink).await }
        })
        .await
    }
}

impl Transport for QuicTransport {
    fn fetch<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<VerifiedBlock, TransportError>> {
        Box::pin(self.fetch_into(peer, namespace, id, BlockReceiver::new(namespace, id)))
    }

    fn fetch_many<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        ids: &'a [BlockId],
    ) -> TransportFuture<'a, Vec<Result<VerifiedBlock, TransportError>>> {
        Box::pin(self.fetch_many_into(peer, namespace, ids, move |id| {
            BlockReceiver::new(namespace, id)
        }))
    }

    fn push<'a>(
        &'a self,
        peer: &'a PeerAddr,
        block: &'a VerifiedBlock,
    ) -> TransportFuture<'a, Result<(), TransportError>> {
        Box::pin(self.inner.client.push(peer, block))
    }

    fn probe<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<u64, TransportError>> {
        Box::pin(self.inner.client.probe(peer, namespace, id))
    }

    fn set_aside(&self, peer: &PeerAddr, since: std::time::Instant) {
        self.inner.client.set_aside(peer, since);
    }

    fn local_peer(&self) -> PeerAddr {
        self.inner.local.clone()
    }

    fn counters(&self) -> CountersSnapshot {
        self.inner.client.counters.snapshot()
    }

    fn close(&self) -> TransportFuture<'_, ()> {
        Box::pin(async move {
            self.inner.accept_task.abort();
            self.inner.client.fetch_slots.close();
            let endpoint = &self.inner.client.endpoint;
            endpoint.close(errors::CLOSE_SHUTDOWN, b"shutdown");
            let wait = Duration::from_millis(CLOSE_WAIT_MS_MAX);
            // Bounded: a peer that never acknowledges the close must not hold us.
            let _ = tokio::time::timeout(wait, endpoint.wait_idle()).await;
        })
    }
}

impl QuicTransport {
    /// The index of `channel` among the pool's channel indices (0 is blocks).
    fn channel_index(&self, channel: &Channel) -> Result<usize, TransportError> {
        let carried = &self.inner.server.channels;
        carried
            .iter()
            .position(|c| c == channel)
            .map(|i| i + 1)
            .ok_or_else(|| no_channel(channel, carried))
    }
}

impl Messenger for QuicTransport {
    fn serve(
        &self,
        channel: Channel,
        handler: Arc<dyn MessageHandler>,
    ) -> Result<(), TransportError> {
        let i = self.channel_index(&channel)? - 1;
        self.inner
            .server
            .handlers
            .write()
            .unwrap_or_else(|p| p.into_inner())[i] = Some(handler);
        Ok(())
    }

    fn call<'a>(
        &'a self,
        channel: Channel,
        peer: &'a PeerAddr,
        request: Vec<u8>,
        limit: Duration,
    ) -> TransportFuture<'a, Result<Vec<u8>, TransportError>> {
        Box::pin(async move {
            let index = self.channel_index(&channel)?;
            self.inner
                .client
                .call(&channel, index, peer, request, limit)
                .await
        })
    }
}
