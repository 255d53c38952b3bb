//! The path rule on real connections (`kvfabric_transport::quic::path`): a connection to a
//! loopback peer discovers loopback's 64 KiB datagrams; one to this host's own non-loopback
//! address — routed over loopback by the kernel, but not a loopback address, so the rule
//! treats it as a network path — stops at the GSO ceiling, 6,550 bytes. Both ends of each
//! connection are `QuicTransport`s as a node binds them; no option of the bench is involved.

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_store::NamespaceKey;
use kvfabric_transport::config::GSO_PAYLOAD_BYTES_MAX;
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::{MemorySource, Transport, TransportConfig};

/// The client's path MTU once it has fetched a few blocks from a server on `ip` and MTU
/// discovery has settled on `settled` (waited for, at most 10 s), or what it reached by then.
async fn discovered_mtu(ip: IpAddr, settled: impl Fn(u16) -> bool) -> u16 {
    let ns = NamespaceKey::derive("path");
    let source = Arc::new(MemorySource::new());
    let blocks: Vec<_> = (0..2).map(|i| test_block(ns, 1 << 20, i + 1)).collect();
    for b in &blocks {
        source.insert(b.clone());
    }
    let (server, client) = common::server_and_client(ip, TransportConfig::default(), source).await;
    let peer = server.local_peer();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut mtu = 0;
    while Instant::now() < deadline {
        for b in &blocks {
            let got = client.fetch(&peer, ns, b.id()).await.expect("fetch");
            assert_eq!(got.bytes(), b.bytes());
        }
        mtu = client
            .connection_stats(&peer)
            .expect("a pooled connection")
            .path
            .current_mtu;
        if settled(mtu) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.close().await;
    server.close().await;
    mtu
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_discovers_large_datagrams_and_a_network_address_stops_at_the_gso_ceiling() {
    let lo = discovered_mtu("127.0.0.1".parse().unwrap(), |m| m > GSO_PAYLOAD_BYTES_MAX).await;
    assert!(lo > GSO_PAYLOAD_BYTES_MAX, "loopback settled at {lo} B");
    let Some(ip) = common::own_network_address() else {
        println!("no non-loopback address on this host: the network half is skipped");
        return;
    };
    let net = discovered_mtu(ip, |m| m == GSO_PAYLOAD_BYTES_MAX).await;
    assert_eq!(
        net, GSO_PAYLOAD_BYTES_MAX,
        "a network path ({ip}) settled at {net} B"
    );
}
