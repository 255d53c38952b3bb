//! Joined sends (`quic.join_sends`, `kvfabric_transport::quic::coalesce`) on real connections:
//! a server on this host's own network address (a network path to the path rule: GSO on)
//! with 1,452-byte datagrams, as at MTU 1500. quinn hands its socket ten datagrams at a time;
//! joined, a block leaves in sends of more, and arrives whole and verified.

mod common;

use std::sync::Arc;

use kvfabric_store::NamespaceKey;
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::{MemorySource, Transport, TransportConfig};

/// Datagrams per send of a server that served 8 blocks of 4 MB to one client.
async fn datagrams_per_send(join: bool) -> Option<f64> {
    let Some(ip) = common::own_network_address() else {
        eprintln!("no network address on this host: the path rule cannot be exercised");
        return None;
    };
    let ns = NamespaceKey::derive("joined");
    let source = Arc::new(MemorySource::new());
    let blocks: Vec<_> = (0..8).map(|i| test_block(ns, 4_000_000, i + 1)).collect();
    for b in &blocks {
        source.insert(b.clone());
    }
    let mut config = TransportConfig::default();
    config.quic.max_udp_payload_bytes = 1_452;
    config.quic.join_sends = join;
    let (server, client) = common::server_and_client(ip, config, source).await;
    let peer = server.local_peer();
    for b in &blocks {
        let got = client.fetch(&peer, ns, b.id()).await.expect("fetch");
        assert_eq!(got.bytes(), b.bytes());
    }
    let mtu = client
        .connection_stats(&peer)
        .expect("pooled")
        .path
        .current_mtu;
    assert!(
        mtu <= 1_452,
        "datagrams of at most 1,452 bytes, found {mtu}"
    );
    let (sends, datagrams) = server.send_stats()?;
    eprintln!("join {join}: {datagrams} datagrams in {sends} sends");
    Some(datagrams as f64 / sends as f64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_leaves_in_sends_of_more_than_quinns_ten_datagrams() {
    let Some(per_send) = datagrams_per_send(true).await else {
        return;
    };
    assert!(
        per_send > 12.0,
        "expected sends of more than quinn's 10 datagrams on average, found {per_send:.1}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_joining_off_the_socket_is_quinns_own() {
    assert_eq!(datagrams_per_send(false).await, None);
}
