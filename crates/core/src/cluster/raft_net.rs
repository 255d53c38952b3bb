//! The Raft network between node processes: the directory's [`FrameTransport`] over QUIC with
//! the cluster's mutual TLS, on its own endpoint and port (ALPN [`RAFT_ALPN`]), separate from
//! the block transport so that bulk block streams never delay a heartbeat.
//!
//! One connection per peer, opened on first use and reused; a bidirectional stream per RPC
//! (one request frame out, one response frame back, both bounded by `frame_bytes_max`). A
//! connection that fails is dropped from the pool, and the call reports the peer as
//! [`DirectoryError::Unreachable`] so that Raft backs off. Peers are dialled by the name their
//! certificate carries (`node{id}`), which TLS checks. The accepting side runs each stream
//! through [`RpcServer::handle_frame`], at most [`RAFT_STREAMS_MAX`] at a time per connection.
//!
//! The same endpoint also carries the control channel ([`super::control`], ALPN
//! [`CONTROL_ALPN`]): connections are told apart by the ALPN their handshake agreed on, and
//! each channel has its own pooled connection per peer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kvfabric_directory::codec::{read_frame, write_frame, FrameKind};
use kvfabric_directory::network::BoxFuture;
use kvfabric_directory::{DirectoryError, FrameTransport, NodeId, RpcServer};
use kvfabric_transport::NodeIdentity;

use super::control::{
    read_msg, write_msg, ControlError, ControlHandler, ControlRequest, ControlResponse,
    CONTROL_ALPN,
};
use quinn::VarInt;

/// ALPN of the Raft endpoint; a block-transport client (`kvfabric/1`) is refused here.
pub const RAFT_ALPN: &[u8] = b"kvfabric-raft/1";
/// Concurrent RPC streams a peer may open on one connection.
pub const RAFT_STREAMS_MAX: u32 = 64;
/// Longest a dial (QUIC and TLS handshake) may take.
const CONNECT_TIMEOUT_MS: u64 = 2_000;

/// Why the Raft network could not start.
#[derive(Debug, thiserror::Error)]
pub enum RaftNetError {
    /// The TLS configuration could not be built from the node's identity.
    #[error("raft TLS: {0}")]
    Tls(String),
    /// The endpoint could not bind its address.
    #[error("binding the raft endpoint on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Counters of the Raft network, for `/metrics`.
#[derive(Debug, Default)]
pub struct RaftNetCounters {
    /// RPCs sent that got a response.
    pub calls_ok: AtomicU64,
    /// RPCs sent that failed (unreachable peer, broken stream, timeout).
    pub calls_failed: AtomicU64,
    /// Connections dialled.
    pub connects: AtomicU64,
    /// RPC streams served.
    pub served: AtomicU64,
    /// Incoming streams refused (bad frame, handler error).
    pub serve_failed: AtomicU64,
}

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Channel {
    Raft,
    Control,
}

/// Where incoming requests go, set once the node's parts exist (streams that arrive before
/// are refused; the caller retries).
#[derive(Default)]
pub struct Handlers {
    /// The directory member's RPC server.
    pub raft: OnceLock<RpcServer>,
    /// The control handler.
    pub control: OnceLock<Arc<dyn ControlHandler>>,
}

/// The QUIC Raft network of one node: client pool and server share one endpoint.
pub struct QuicRaftNet {
    endpoint: quinn::Endpoint,
    raft_client: quinn::ClientConfig,
    control_client: quinn::ClientConfig,
    conns: Mutex<HashMap<(NodeId, Channel), quinn::Connection>>,
    frame_bytes_max: usize,
    rpc_timeout: Duration,
    counters: Arc<RaftNetCounters>,
    accept: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl QuicRaftNet {
    /// Binds `listen` with `identity`'s certificate; serving starts with [`QuicRaftNet::serve`].
    pub fn bind(
        identity: &NodeIdentity,
        listen: SocketAddr,
        frame_bytes_max: usize,
        rpc_timeout: Duration,
    ) -> Result<Arc<QuicRaftNet>, RaftNetError> {
        let (server, raft_client, control_client) = super::peer_tls::quic_configs(identity)?;
        let endpoint =
            quinn::Endpoint::server(server, listen).map_err(|source| RaftNetError::Bind {
                addr: listen,
                source,
            })?;
        Ok(Arc::new(QuicRaftNet {
            endpoint,
            raft_client,
            control_client,
            conns: Mutex::new(HashMap::new()),
            frame_bytes_max,
            rpc_timeout,
            counters: Arc::new(RaftNetCounters::default()),
            accept: Mutex::new(None),
        }))
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.local_addr().ok()
    }

    /// The counters.
    pub fn counters(&self) -> &RaftNetCounters {
        &self.counters
    }

    /// Starts accepting: every incoming stream is one request for `handlers`.
    pub fn serve(self: &Arc<Self>, server: Arc<Handlers>) {
        let net = self.clone();
        let task = tokio::spawn(async move {
            while let Some(incoming) = net.endpoint.accept().await {
                let (net, server) = (net.clone(), server.clone());
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    net.serve_connection(conn, server).await;
                });
            }
        });
        *self.accept.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    async fn serve_connection(self: Arc<Self>, conn: quinn::Connection, server: Arc<Handlers>) {
        let alpn = conn
            .handshake_data()
            .and_then(|h| h.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|h| h.protocol);
        let channel = match alpn.as_deref() {
            Some(p) if p == CONTROL_ALPN => Channel::Control,
            _ => Channel::Raft,
        };
        while let Ok((send, recv)) = conn.accept_bi().await {
            let (net, server) = (self.clone(), server.clone());
            tokio::spawn(async move {
                let ok = match channel {
                    Channel::Raft => net.serve_stream(send, recv, &server.raft).await,
                    Channel::Control => net.serve_control(send, recv, &server.control).await,
                };
                let c = if ok {
                    &net.counters.served
                } else {
                    &net.counters.serve_failed
                };
                c.fetch_add(1, Ordering::Relaxed);
            });
        }
    }

    async fn serve_stream(
        &self,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        server: &OnceLock<RpcServer>,
    ) -> bool {
        let Some(server) = server.get() else {
            let _ = send.reset(VarInt::from_u32(1));
            return false;
        };
        let work = async {
            let req = read_frame(&mut recv, FrameKind::Request, self.frame_bytes_max).await?;
            let resp = server.handle_frame(&req).await?;
            write_frame(&mut send, &resp).await?;
            let _ = send.finish();
            Ok::<(), DirectoryError>(())
        };
        // The handler bounds its own writes; this bounds a peer that sends slowly.
        match tokio::time::timeout(self.rpc_timeout * 4, work).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "raft rpc refused");
                let _ = send.reset(VarInt::from_u32(2));
                false
            }
            Err(_) => {
                let _ = send.reset(VarInt::from_u32(3));
                false
            }
        }
    }

    async fn serve_control(
        &self,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        handler: &OnceLock<Arc<dyn ControlHandler>>,
    ) -> bool {
        let Some(handler) = handler.get() else {
            let _ = send.reset(VarInt::from_u32(1));
            return false;
        };
        let req: ControlRequest = match read_msg(&mut recv).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "control request refused");
                let _ = send.reset(VarInt::from_u32(2));
                return false;
            }
        };
        // The handler bounds its own work (a fetch, an install, a directory write).
        let resp = handler.handle(req).await;
        if write_msg(&mut send, &resp).await.is_err() {
            return false;
        }
        send.finish().is_ok()
    }

    /// Sends one control request to member `to` at `addr` and waits for its answer, within
    /// `limit`.
    pub async fn control_call(
        &self,
        to: NodeId,
        addr: SocketAddr,
        req: &ControlRequest,
        limit: Duration,
    ) -> Result<ControlResponse, ControlError> {
        let call = async {
            let conn = self
                .connection(to, &addr.to_string(), Channel::Control)
                .await
                .map_err(|e| ControlError::Unreachable {
                    node: to.0,
                    reason: e.to_string(),
                })?;
            let broken = |reason: String| ControlError::Unreachable { node: to.0, reason };
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| broken(e.to_string()))?;
            write_msg(&mut send, req).await?;
            send.finish().map_err(|e| broken(e.to_string()))?;
            read_msg(&mut recv).await
        };
        let r = match tokio::time::timeout(limit, call).await {
            Ok(r) => r,
            Err(_) => Err(ControlError::Unreachable {
                node: to.0,
                reason: format!("no answer within {} ms", limit.as_millis()),
            }),
        };
        if r.is_err() {
            self.conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(to, Channel::Control));
        }
        r
    }

    async fn connection(
        &self,
        to: NodeId,
        addr: &str,
        channel: Channel,
    ) -> Result<quinn::Connection, DirectoryError> {
        if let Some(c) = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(to, channel))
        {
            if c.close_reason().is_none() {
                return Ok(c.clone());
            }
        }
        let unreachable = |reason: String| DirectoryError::Unreachable { node: to, reason };
        let sock: SocketAddr = addr
            .parse()
            .map_err(|_| unreachable(format!("expected IP:PORT, found {addr:?}")))?;
        let config = match channel {
            Channel::Raft => self.raft_client.clone(),
            Channel::Control => self.control_client.clone(),
        };
        let connecting = self
            .endpoint
            .connect_with(config, sock, &format!("node{}", to.0))
            .map_err(|e| unreachable(e.to_string()))?;
        let conn = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connecting)
            .await
            .map_err(|_| unreachable(format!("no handshake within {CONNECT_TIMEOUT_MS} ms")))?
            .map_err(|e| unreachable(e.to_string()))?;
        self.counters.connects.fetch_add(1, Ordering::Relaxed);
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((to, channel), conn.clone());
        Ok(conn)
    }

    async fn call_once(
        &self,
        to: NodeId,
        addr: &str,
        frame: &[u8],
    ) -> Result<Vec<u8>, DirectoryError> {
        let conn = self.connection(to, addr, Channel::Raft).await?;
        let broken = |reason: String| DirectoryError::Unreachable { node: to, reason };
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| broken(e.to_string()))?;
        write_frame(&mut send, frame).await?;
        send.finish().map_err(|e| broken(e.to_string()))?;
        read_frame(&mut recv, FrameKind::Response, self.frame_bytes_max).await
    }

    /// Stops serving and closes every connection.
    pub fn close(&self) {
        if let Some(t) = self.accept.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
        self.endpoint.close(VarInt::from_u32(0), b"shutdown");
    }
}

impl FrameTransport for QuicRaftNet {
    fn call<'a>(
        &'a self,
        _from: NodeId,
        to: NodeId,
        addr: &'a str,
        frame: Vec<u8>,
    ) -> BoxFuture<'a, Result<Vec<u8>, DirectoryError>> {
        Box::pin(async move {
            let r = match tokio::time::timeout(self.rpc_timeout, self.call_once(to, addr, &frame))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(DirectoryError::Unreachable {
                    node: to,
                    reason: format!("no response within {} ms", self.rpc_timeout.as_millis()),
                }),
            };
            match &r {
                Ok(_) => self.counters.calls_ok.fetch_add(1, Ordering::Relaxed),
                Err(_) => {
                    // A broken connection must not be reused; the next call dials again.
                    self.conns
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&(to, Channel::Raft));
                    self.counters.calls_failed.fetch_add(1, Ordering::Relaxed)
                }
            };
            r
        })
    }
}

#[cfg(test)]
#[path = "raft_net_tests.rs"]
mod tests;
