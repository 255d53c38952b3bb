//! From [`TransportConfig`] to quinn's configs and a UDP socket: where the QUIC throughput
//! knobs are applied (see the crate docs for which ones mattered, measured).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{IdleTimeout, MtuDiscoveryConfig, VarInt};
use socket2::{Domain, Protocol, Socket, Type};

use crate::certs::NodeIdentity;
use crate::config::TransportConfig;
use crate::error::TransportError;
use crate::quic::tls;

fn varint(field: &'static str, v: u64) -> Result<VarInt, TransportError> {
    VarInt::from_u64(v).map_err(|_| TransportError::Config {
        field,
        reason: format!("expected at most 2^62, found {v}"),
    })
}

/// quinn's per-connection transport parameters. `accept_streams` is how many block streams
/// the peer may open to us at once (0 on the client side: servers never open streams).
pub fn quinn_transport(
    cfg: &TransportConfig,
    accept_streams: u32,
) -> Result<quinn::TransportConfig, TransportError> {
    let q = &cfg.quic;
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(accept_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .datagram_receive_buffer_size(None)
        .max_idle_timeout(Some(
            IdleTimeout::try_from(Duration::from_millis(cfg.idle_timeout_ms)).map_err(|_| {
                TransportError::Config {
                    field: "idle_timeout_ms",
                    reason: format!("expected below 2^62 µs, found {}", cfg.idle_timeout_ms),
                }
            })?,
        ))
        .keep_alive_interval(Some(Duration::from_millis(cfg.keep_alive_ms)))
        .stream_receive_window(varint(
            "quic.stream_receive_window_bytes",
            q.stream_receive_window_bytes,
        )?)
        .receive_window(varint(
            "quic.connection_receive_window_bytes",
            q.connection_receive_window_bytes,
        )?)
        .send_window(q.send_window_bytes)
        .send_fairness(q.send_fairness)
        .initial_rtt(Duration::from_millis(q.initial_rtt_ms))
        .initial_mtu(q.initial_mtu_bytes)
        .min_mtu(1200)
        .enable_segmentation_offload(q.segmentation_offload);
    if q.mtu_discovery {
        let mut mtud = MtuDiscoveryConfig::default();
        mtud.upper_bound(q.max_udp_payload_bytes);
        t.mtu_discovery_config(Some(mtud));
    } else {
        t.mtu_discovery_config(None);
    }
    Ok(t)
}

/// quinn's endpoint config: the largest UDP payload we accept.
///
/// The stateless-reset key is derived from `identity`'s private key, so a node that restarts
/// (same certificate, same address) answers packets of its previous process's connections
/// with resets its peers accept: their pooled connections to it end at once instead of
/// staying silent until `idle_timeout_ms` (quinn's default key is random per process, and a
/// reset signed with another key is ignored, RFC 9000 §10.3). The connection ids' check key
/// is derived the same way.
pub fn quinn_endpoint(
    cfg: &TransportConfig,
    identity: &NodeIdentity,
) -> Result<quinn::EndpointConfig, TransportError> {
    let reset = node_secret(identity, b"kvfabric quic stateless reset v1");
    let mut e = quinn::EndpointConfig::new(Arc::new(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        reset.as_ref(),
    )));
    // The connection ids' check key too: a packet whose id the endpoint cannot validate is
    // dropped, not reset, so the new process must recognise its predecessor's ids.
    let cid = node_secret(identity, b"kvfabric quic connection ids v1");
    let mut cid_key = [0u8; 8];
    cid_key.copy_from_slice(&cid.as_ref()[..8]);
    let cid_key = u64::from_le_bytes(cid_key);
    e.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key)));
    e.max_udp_payload_size(cfg.quic.max_udp_payload_bytes)
        .map_err(|e| TransportError::Config {
            field: "quic.max_udp_payload_bytes",
            reason: e.to_string(),
        })?;
    Ok(e)
}

/// HMAC-SHA256 of `label` under the node's private key: secret, and the same in every process
/// of the node.
fn node_secret(identity: &NodeIdentity, label: &[u8]) -> ring::hmac::Tag {
    use ring::hmac;
    let key = identity.key();
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key.secret_der()), label)
}

/// The server config: mTLS for `alpns` plus the accepting side's stream bound.
pub fn server_config(
    cfg: &TransportConfig,
    identity: &NodeIdentity,
    alpns: &[&[u8]],
) -> Result<quinn::ServerConfig, TransportError> {
    let crypto = tls::server_crypto_for(identity, alpns)?;
    let mut s = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    s.transport_config(Arc::new(quinn_transport(cfg, cfg.serve_streams_max)?));
    // Connections are bounded at accept time (connections_max); this bounds the backlog.
    s.max_incoming(cfg.connections_max);
    s.migration(false);
    Ok(s)
}

/// The client config of connections carrying `alpn`: mTLS; peers may not open streams to us.
pub fn client_config(
    cfg: &TransportConfig,
    identity: &NodeIdentity,
    alpn: &[u8],
) -> Result<quinn::ClientConfig, TransportError> {
    let crypto = tls::client_crypto_for(identity, alpn)?;
    let mut c = quinn::ClientConfig::new(Arc::new(crypto));
    c.transport_config(Arc::new(quinn_transport(cfg, 0)?));
    Ok(c)
}

/// A UDP socket bound to `addr` with the socket buffers asked for (the kernel caps them at
/// `net.core.rmem_max` / `wmem_max`; a datagram dropped for lack of buffer costs a loss
/// recovery, which is what throttles QUIC on a fast path).
pub fn bind_socket(
    addr: SocketAddr,
    cfg: &TransportConfig,
) -> Result<std::net::UdpSocket, TransportError> {
    let ctx = |what: &str| format!("binding UDP {addr}: {what}");
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| TransportError::io(ctx("socket"), e))?;
    if addr.is_ipv6() {
        socket.set_only_v6(false).ok();
    }
    // Best effort: a smaller buffer than asked is slower, not wrong. 0 keeps the OS default.
    if cfg.quic.socket_buffer_bytes > 0 {
        socket
            .set_recv_buffer_size(cfg.quic.socket_buffer_bytes)
            .ok();
        socket
            .set_send_buffer_size(cfg.quic.socket_buffer_bytes)
            .ok();
    }
    socket
        .bind(&addr.into())
        .map_err(|e| TransportError::io(ctx("bind"), e))?;
    Ok(socket.into())
}
