//! Mutual TLS 1.3 for QUIC with rustls on ring: both sides present a certificate signed by
//! the cluster CA, and both sides refuse one that is not.
//!
//! Owns the rustls configs. The server requires and verifies client certificates against the
//! CA (`WebPkiClientVerifier`); the client verifies the server against the CA and the node
//! name it dialled. AES-128-GCM is preferred over AES-256-GCM: the same AEAD construction with
//! ten AES rounds instead of fourteen on the bulk path (not measured separately).

use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::certs::NodeIdentity;
use crate::error::TransportError;

/// ALPN protocol id; a peer speaking anything else is refused in the handshake.
pub const ALPN: &[u8] = b"kvfabric/1";

fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    let aes128 = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    p.cipher_suites.retain(|s| s.suite() != aes128.suite());
    p.cipher_suites.insert(0, aes128);
    Arc::new(p)
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Certs {
        path: "<tls config>".into(),
        reason: format!("{what}: {e}"),
    }
}

fn roots(identity: &NodeIdentity) -> Result<Arc<RootCertStore>, TransportError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(identity.ca_cert().clone())
        .map_err(|e| tls_err("cluster CA", e))?;
    Ok(Arc::new(roots))
}

/// The server side: presents `identity`, requires a client certificate signed by its CA;
/// speaks the block ALPN only.
pub fn server_crypto(identity: &NodeIdentity) -> Result<QuicServerConfig, TransportError> {
    server_crypto_for(identity, &[ALPN])
}

/// The server side for `alpns` (the block ALPN and the channels' ones): the handshake agrees
/// on one of them, which says what the connection carries.
pub fn server_crypto_for(
    identity: &NodeIdentity,
    alpns: &[&[u8]],
) -> Result<QuicServerConfig, TransportError> {
    let tls = server_tls(identity, alpns)?;
    QuicServerConfig::try_from(tls).map_err(|e| tls_err("QUIC server crypto", e))
}

/// The rustls server config under [`server_crypto_for`] (mTLS, TLS 1.3, `alpns`): also what
/// a TLS-over-TCP peer of the cluster would use (the transport bench's TLS baseline).
pub fn server_tls(
    identity: &NodeIdentity,
    alpns: &[&[u8]],
) -> Result<rustls::ServerConfig, TransportError> {
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(identity)?, provider.clone())
        .build()
        .map_err(|e| tls_err("client verifier", e))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err("TLS 1.3", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.cert_chain().to_vec(), identity.key())
        .map_err(|e| tls_err("server certificate", e))?;
    tls.alpn_protocols = alpns.iter().map(|a| a.to_vec()).collect();
    tls.max_early_data_size = 0;
    Ok(tls)
}

/// The client side: presents `identity`, accepts only servers signed by its CA; speaks the
/// block ALPN.
pub fn client_crypto(identity: &NodeIdentity) -> Result<QuicClientConfig, TransportError> {
    client_crypto_for(identity, ALPN)
}

/// The client side of the connections that carry `alpn`.
pub fn client_crypto_for(
    identity: &NodeIdentity,
    alpn: &[u8],
) -> Result<QuicClientConfig, TransportError> {
    let tls = client_tls(identity, alpn)?;
    QuicClientConfig::try_from(tls).map_err(|e| tls_err("QUIC client crypto", e))
}

/// The rustls client config under [`client_crypto_for`] (mTLS, TLS 1.3, `alpn`).
pub fn client_tls(
    identity: &NodeIdentity,
    alpn: &[u8],
) -> Result<rustls::ClientConfig, TransportError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err("TLS 1.3", e))?
        .with_root_certificates(roots(identity)?)
        .with_client_auth_cert(identity.cert_chain().to_vec(), identity.key())
        .map_err(|e| tls_err("client certificate", e))?;
    tls.alpn_protocols = vec![alpn.to_vec()];
    Ok(tls)
}
