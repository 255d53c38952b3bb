//! The in-memory transport's fault hooks do what they say: a dropped link and a killed peer
//! leave calls unanswered until the caller's bound (typed timeouts), a refused peer fails at
//! once, a delayed link still answers, a killed peer can ask nothing, and healing (or
//! reviving) brings every path back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_store::NamespaceKey;
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::conformance::suite_config;
use kvfabric_transport::{MemoryNetwork, MemorySource, Transport, TransportConfig, TransportError};

fn ns() -> NamespaceKey {
    NamespaceKey::derive("memory-faults")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_delay_refuse_and_kill_act_on_the_paths_they_name() {
    let net = MemoryNetwork::new(3);
    let config = TransportConfig {
        fetch_timeout_ms: 500,
        connect_timeout_ms: 500,
        ..suite_config()
    };
    let block = test_block(ns(), 10_000, 1);
    let source = MemorySource::new();
    source.insert(block.clone());
    let a = net
        .join(
            "node1",
            config.clone(),
            Arc::new(MemorySource::new()),
            vec![],
        )
        .unwrap();
    let b = net
        .join("node2", config.clone(), Arc::new(source), vec![])
        .unwrap();
    let c = net
        .join(
            "node3",
            config.clone(),
            Arc::new(MemorySource::new()),
            vec![],
        )
        .unwrap();
    let to_b = b.local_peer();
    a.fetch(&to_b, ns(), block.id()).await.expect("healthy");

    tracing::info!("drop: node1 → node2 times out, node3 → node2 still answers");
    net.drop_link("node1", "node2");
    let started = Instant::now();
    let err = a.fetch(&to_b, ns(), block.id()).await.unwrap_err();
    assert!(
        matches!(err, TransportError::Timeout { what: "fetch", .. }),
        "{err}"
    );
    assert!(started.elapsed() >= Duration::from_millis(500));
    c.fetch(&to_b, ns(), block.id())
        .await
        .expect("another link is untouched");
    net.heal();
    a.fetch(&to_b, ns(), block.id()).await.expect("healed");

    tracing::info!("delay: answered, after the delay");
    net.delay_link("node1", "node2", 200);
    let started = Instant::now();
    a.fetch(&to_b, ns(), block.id())
        .await
        .expect("delayed, not lost");
    assert!(started.elapsed() >= Duration::from_millis(200));
    net.heal();

    tracing::info!("refuse: a typed connect error, at once");
    net.refuse("node2");
    let err = a.push(&to_b, &block).await.unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err}");
    assert!(err.is_peer_unreachable());
    net.heal();

    tracing::info!("kill: node2 answers nothing and asks nothing; revive brings it back");
    net.kill("node2");
    let err = a.probe(&to_b, ns(), block.id()).await.unwrap_err();
    assert!(
        matches!(err, TransportError::Timeout { what: "probe", .. }),
        "{err}"
    );
    let err = b
        .fetch(&a.local_peer(), ns(), block.id())
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Closed), "{err}");
    net.revive("node2");
    assert_eq!(
        a.probe(&to_b, ns(), block.id()).await.expect("revived"),
        block.bytes().len() as u64
    );

    tracing::info!("drop at random: some requests lost, the rest answered");
    net.drop_per_mille(500);
    let mut lost = 0;
    for _ in 0..20 {
        if a.probe(&to_b, ns(), block.id()).await.is_err() {
            lost += 1;
        }
    }
    assert!((1..20).contains(&lost), "{lost} of 20 lost at 50%");
    net.heal();
    for t in [a, b, c] {
        t.close().await;
    }
}
