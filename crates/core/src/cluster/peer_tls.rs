//! The rustls and quinn configs of the cluster's own QUIC endpoint (Raft and control): TLS 1.3
//! with mutual authentication against the cluster CA, as the block transport does (same
//! provider, same verifiers), but with the endpoint's own ALPNs, so that a block-transport
//! peer cannot speak Raft and the reverse.

use std::sync::Arc;
use std::time::Duration;

use kvfabric_transport::NodeIdentity;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, VarInt};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::control::CONTROL_ALPN;
use super::raft_net::{RaftNetError, RAFT_ALPN, RAFT_STREAMS_MAX};

/// A connection with no traffic for this long is closed (heartbeats keep live ones open).
const IDLE_TIMEOUT_MS: u64 = 10_000;
/// Keep-alive period of an otherwise idle connection.
const KEEP_ALIVE_MS: u64 = 2_000;

/// The server config (both ALPNs) and one client config per channel: TLS 1.3, both sides
/// present a certificate the cluster CA signed.
pub(super) fn quic_configs(
    identity: &NodeIdentity,
) -> Result<
    (
        quinn::ServerConfig,
        quinn::ClientConfig,
        quinn::ClientConfig,
    ),
    RaftNetError,
> {
    let tls = |what: &str, e: &dyn std::fmt::Display| RaftNetError::Tls(format!("{what}: {e}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots
        .add(identity.ca_cert().clone())
        .map_err(|e| tls("cluster CA", &e))?;
    let roots = Arc::new(roots);
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| tls("client verifier", &e))?;
    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls("TLS 1.3", &e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.cert_chain().to_vec(), identity.key())
        .map_err(|e| tls("server certificate", &e))?;
    server_tls.alpn_protocols = vec![RAFT_ALPN.to_vec(), CONTROL_ALPN.to_vec()];
    server_tls.max_early_data_size = 0;
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls("TLS 1.3", &e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(identity.cert_chain().to_vec(), identity.key())
        .map_err(|e| tls("client certificate", &e))?;
    let mut control_tls = client_tls.clone();
    client_tls.alpn_protocols = vec![RAFT_ALPN.to_vec()];
    control_tls.alpn_protocols = vec![CONTROL_ALPN.to_vec()];

    let transport = Arc::new(transport_config()?);
    let server_crypto =
        QuicServerConfig::try_from(server_tls).map_err(|e| tls("QUIC server crypto", &e))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
    server.transport_config(transport.clone());
    let client_crypto =
        QuicClientConfig::try_from(client_tls).map_err(|e| tls("QUIC client crypto", &e))?;
    let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
    client.transport_config(transport.clone());
    let control_crypto =
        QuicClientConfig::try_from(control_tls).map_err(|e| tls("QUIC client crypto", &e))?;
    let mut control = quinn::ClientConfig::new(Arc::new(control_crypto));
    control.transport_config(transport);
    Ok((server, client, control))
}

fn transport_config() -> Result<quinn::TransportConfig, RaftNetError> {
    let mut t = quinn::TransportConfig::default();
    let idle = IdleTimeout::try_from(Duration::from_millis(IDLE_TIMEOUT_MS))
        .map_err(|e| RaftNetError::Tls(format!("idle timeout: {e}")))?;
    t.max_concurrent_bidi_streams(VarInt::from_u32(RAFT_STREAMS_MAX))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(Duration::from_millis(KEEP_ALIVE_MS)));
    Ok(t)
}
