//! Shared by the QUIC integration tests: a factory of real quinn endpoints on 127.0.0.1, all
//! issued by one in-memory cluster CA.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use kvfabric_transport::conformance::TransportFactory;
use kvfabric_transport::frame::{FrameHeader, FRAME_HEADER_LEN};
use kvfabric_transport::quic::tuning;
use kvfabric_transport::{
    BlockSource, ClusterCa, NodeIdentity, PeerAddr, QuicTransport, TransportConfig, TransportError,
    TransportFuture,
};

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("loopback address")
}

/// This host's address toward a non-loopback destination, if it has one (no packet is sent:
/// connecting a UDP socket only picks the route). The kernel routes it over loopback, but the
/// path rule (`kvfabric_transport::quic::path`) treats it as a network path.
pub fn own_network_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A server (node1) serving `source` and a client (node2), both on `ip` and `config`, as a
/// node binds them.
pub async fn server_and_client(
    ip: std::net::IpAddr,
    config: TransportConfig,
    source: Arc<dyn BlockSource>,
) -> (QuicTransport, QuicTransport) {
    let ca = ClusterCa::generate().expect("CA");
    let addr = SocketAddr::new(ip, 0);
    let server = QuicTransport::bind(config.clone(), &ca.issue("node1").unwrap(), addr, source)
        .await
        .expect("server");
    let client = QuicTransport::bind(
        config,
        &ca.issue("node2").unwrap(),
        addr,
        Arc::new(kvfabric_transport::MemorySource::new()),
    )
    .await
    .expect("client");
    (server, client)
}

/// Builds QUIC transports named node1, node2, … on loopback.
pub struct QuicFactory {
    pub ca: ClusterCa,
    next: AtomicU32,
}

impl QuicFactory {
    pub fn new() -> QuicFactory {
        QuicFactory {
            ca: ClusterCa::generate().expect("CA"),
            next: AtomicU32::new(1),
        }
    }

    pub fn next_name(&self) -> String {
        format!("node{}", self.next.fetch_add(1, Ordering::Relaxed))
    }
}

impl TransportFactory for QuicFactory {
    type T = QuicTransport;

    fn build(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
    ) -> TransportFuture<'_, Result<QuicTransport, TransportError>> {
        Box::pin(async move {
            let identity = self.ca.issue(&self.next_name())?;
            QuicTransport::bind(config, &identity, loopback(), source).await
        })
    }
}

impl kvfabric_transport::conformance::messages::MessengerFactory for QuicFactory {
    type T = QuicTransport;

    fn build_with_channels(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
        channels: Vec<kvfabric_transport::Channel>,
    ) -> TransportFuture<'_, Result<QuicTransport, TransportError>> {
        Box::pin(async move {
            let identity = self.ca.issue(&self.next_name())?;
            QuicTransport::bind_with_channels(config, &identity, loopback(), source, channels).await
        })
    }
}

/// A hand-rolled QUIC peer speaking (or breaking) the protocol, on its own runtime so that
/// [`RawPeer::kill`] can make it vanish at once: no close frame, no more packets.
pub struct RawPeer {
    pub peer: PeerAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl RawPeer {
    /// Serves every stream of every connection with `handler`.
    pub fn start<F, Fut>(identity: &NodeIdentity, handler: F) -> RawPeer
    where
        F: Fn(quinn::Connection, quinn::SendStream, quinn::RecvStream) -> Fut
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let config = tuning::server_config(
            &TransportConfig::default(),
            identity,
            &[kvfabric_transport::quic::tls::ALPN],
        )
        .expect("config");
        let endpoint = {
            let _enter = rt.enter();
            quinn::Endpoint::server(config, loopback()).expect("bind")
        };
        let addr = endpoint.local_addr().expect("addr");
        let handler = Arc::new(handler);
        rt.spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let handler = handler.clone();
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    while let Ok((send, recv)) = conn.accept_bi().await {
                        tokio::spawn(handler(conn.clone(), send, recv));
                    }
                });
            }
        });
        RawPeer {
            peer: PeerAddr::new(identity.name(), addr),
            rt: Some(rt),
        }
    }

    /// Dies: its tasks and socket are dropped at once.
    pub fn kill(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for RawPeer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads a request header off a raw stream.
pub async fn read_request(recv: &mut quinn::RecvStream) -> FrameHeader {
    let mut head = [0u8; FRAME_HEADER_LEN];
    recv.read_exact(&mut head).await.expect("request header");
    FrameHeader::decode(&head, 0).expect("valid request")
}

/// A raw client connection to `peer`, presenting `identity`.
pub async fn raw_connect(identity: &NodeIdentity, peer: &PeerAddr) -> quinn::Connection {
    let mut endpoint = quinn::Endpoint::client(loopback()).expect("client endpoint");
    endpoint.set_default_client_config(
        tuning::client_config(
            &TransportConfig::default(),
            identity,
            kvfabric_transport::quic::tls::ALPN,
        )
        .expect("config"),
    );
    endpoint
        .connect(peer.addr, &peer.name)
        .expect("connect")
        .await
        .expect("handshake")
}
