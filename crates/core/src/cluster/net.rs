//! The node's traffic besides blocks, over the transport's message channels
//! ([`kvfabric_transport::Messenger`]): Raft ([`RaftNet`], the directory's
//! [`FrameTransport`], and [`RaftServer`], its callee) and the control channel
//! ([`CONTROL_CHANNEL`], served by `control_server`). On QUIC both ride the node's one
//! endpoint under their own ALPNs, authenticated by the cluster's mutual TLS like blocks; in
//! tests they ride the in-memory transport.
//!
//! Raft dials members by the block transport's [`PeerAddr`] the config gives them (name
//! `node{id}`, checked by TLS), not by the address in the Raft membership: a membership
//! written by an older layout (Raft on a port of its own) still reaches the right endpoint.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvfabric_directory::network::BoxFuture;
use kvfabric_directory::{DirectoryConfig, DirectoryError, FrameTransport, NodeId, RpcServer};
use kvfabric_transport::{
    Channel, MessageHandler, Messenger, PeerAddr, TransportError, TransportFuture,
};

/// ALPN of the Raft channel.
pub const RAFT_ALPN: &[u8] = b"kvfabric-raft/1";
/// ALPN of the control channel.
pub const CONTROL_ALPN: &[u8] = b"kvfabric-ctl/1";

/// The control channel: small JSON requests (`usage`), answered within a few seconds.
pub const CONTROL_CHANNEL: Channel = Channel {
    alpn: CONTROL_ALPN,
    message_bytes_max: 64 * 1024,
    handle_timeout_ms: 10_000,
};

/// The Raft channel for a directory configured with `d`: RPC frames up to its
/// `frame_bytes_max`; a handler (which bounds its own writes) at most four RPC timeouts.
pub fn raft_channel(d: &DirectoryConfig) -> Channel {
    Channel {
        alpn: RAFT_ALPN,
        message_bytes_max: d.frame_bytes_max,
        handle_timeout_ms: d.rpc_timeout_ms.saturating_mul(4),
    }
}

/// Counters of the Raft network, for `/metrics`.
#[derive(Debug, Default)]
pub struct RaftNetCounters {
    /// RPCs sent that got a response.
    pub calls_ok: AtomicU64,
    /// RPCs sent that failed (unreachable peer, broken stream, timeout).
    pub calls_failed: AtomicU64,
    /// RPCs their caller gave up on before an answer or a failure came. openraft 0.9 bounds
    /// each AppendEntries (heartbeats included) by the heartbeat interval and each vote by
    /// the least election timeout, and drops the call when that passes: a member whose
    /// round trip plus disk sync is longer cannot be replicated to, and only this counter
    /// says so.
    pub calls_abandoned: AtomicU64,
    /// RPC requests served.
    pub served: AtomicU64,
}

/// The directory's network: each RPC frame one message on the Raft channel.
pub struct RaftNet {
    messenger: Arc<dyn Messenger>,
    peers: BTreeMap<NodeId, PeerAddr>,
    channel: Channel,
    rpc_timeout: Duration,
    counters: Arc<RaftNetCounters>,
}

impl RaftNet {
    /// A network over `messenger` to `peers`, each RPC bounded by `d.rpc_timeout_ms`.
    pub fn new(
        messenger: Arc<dyn Messenger>,
        peers: BTreeMap<NodeId, PeerAddr>,
        d: &DirectoryConfig,
    ) -> RaftNet {
        RaftNet {
            messenger,
            peers,
            channel: raft_channel(d),
            rpc_timeout: Duration::from_millis(d.rpc_timeout_ms),
            counters: Arc::new(RaftNetCounters::default()),
        }
    }

    /// Its counters.
    pub fn counters(&self) -> Arc<RaftNetCounters> {
        self.counters.clone()
    }

    /// The callee side: `server`'s answers to this network's requests, counted here.
    pub fn server(&self, server: RpcServer) -> Arc<RaftServer> {
        Arc::new(RaftServer {
            server,
            counters: self.counters.clone(),
        })
    }

    fn peer(&self, to: NodeId, addr: &str) -> Result<PeerAddr, DirectoryError> {
        if let Some(p) = self.peers.get(&to) {
            return Ok(p.clone());
        }
        let sock = addr.parse().map_err(|_| DirectoryError::Unreachable {
            node: to,
            reason: format!("not a configured member, and {addr:?} is not IP:PORT"),
        })?;
        Ok(PeerAddr::new(format!("node{}", to.0), sock))
    }
}

impl FrameTransport for RaftNet {
    fn call<'a>(
        &'a self,
        _from: NodeId,
        to: NodeId,
        addr: &'a str,
        frame: Vec<u8>,
    ) -> BoxFuture<'a, Result<Vec<u8>, DirectoryError>> {
        Box::pin(async move {
            let peer = self.peer(to, addr)?;
            let pending = Abandoned(Some(&self.counters.calls_abandoned));
            let r = self
                .messenger
                .call(self.channel, &peer, frame, self.rpc_timeout)
                .await
                .map_err(|e| unreachable(to, e));
            pending.answered();
            let c = match r {
                Ok(_) => &self.counters.calls_ok,
                Err(_) => &self.counters.calls_failed,
            };
            c.fetch_add(1, Ordering::Relaxed);
            r
        })
    }
}

/// Counts a call dropped before it ended (its caller's deadline passed).
struct Abandoned<'a>(Option<&'a AtomicU64>);

impl Abandoned<'_> {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A transport failure as Raft sees it: the member is unreachable (Raft backs off).
fn unreachable(node: NodeId, e: TransportError) -> DirectoryError {
    DirectoryError::Unreachable {
        node,
        reason: e.to_string(),
    }
}

/// Answers Raft RPC frames with a directory member's [`RpcServer`].
pub struct RaftServer {
    server: RpcServer,
    counters: Arc<RaftNetCounters>,
}

impl MessageHandler for RaftServer {
    fn handle(&self, request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            match self.server.handle_frame(&request).await {
                Ok(resp) => {
                    self.counters.served.fetch_add(1, Ordering::Relaxed);
                    Some(resp)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "raft rpc refused");
                    None
                }
            }
        })
    }
}

#[cfg(test)]
#[path = "net_tests.rs"]
mod tests;
