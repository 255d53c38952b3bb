//! The Raft network over real QUIC sockets on loopback.

use super::*;
use kvfabric_directory::{Directory, DirectoryConfig, ShardId, SystemClock};
use std::collections::BTreeMap;

fn fast_config() -> DirectoryConfig {
    DirectoryConfig {
        heartbeat_interval_ms: 50,
        election_timeout_min_ms: 300,
        election_timeout_max_ms: 600,
        ..DirectoryConfig::default()
    }
}

/// Three directories over real QUIC sockets elect a leader and commit a join; a peer
/// with no listener is reported unreachable, not hung on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_commit_over_quic() {
    let certs = tempfile::tempdir().expect("tempdir");
    kvfabric_transport::generate_cluster(certs.path(), 3).expect("certs");
    let data = tempfile::tempdir().expect("tempdir");
    let config = fast_config();
    let mut nets = Vec::new();
    let mut addrs = BTreeMap::new();
    for n in 1..=3u64 {
        let id = NodeIdentity::load_from_dir(certs.path(), &format!("node{n}")).expect("id");
        let net = QuicRaftNet::bind(
            &id,
            "127.0.0.1:0".parse().unwrap(),
            1 << 23,
            Duration::from_millis(2_000),
        )
        .expect("bind");
        addrs.insert(NodeId(n), net.local_addr().expect("addr").to_string());
        nets.push(net);
    }
    let mut dirs = Vec::new();
    for (i, net) in nets.iter().enumerate() {
        let id = NodeId(i as u64 + 1);
        let slot = Arc::new(Handlers::default());
        net.serve(slot.clone());
        let dir = Directory::open(
            id,
            ShardId(0),
            &data.path().join(format!("n{}", id.0)),
            config.clone(),
            net.clone(),
            Arc::new(SystemClock),
        )
        .await
        .expect("open");
        let _ = slot.raft.set(dir.rpc_server());
        dirs.push(dir);
    }
    dirs[0].initialize(addrs.clone()).await.expect("initialize");
    let epoch = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match dirs[2].join(NodeId(3)).await {
                Ok(e) => break e,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
    .expect("a join commits within 30 s");
    assert!(epoch.0 >= 1);
    let ok: u64 = nets
        .iter()
        .map(|n| n.counters().calls_ok.load(Ordering::Relaxed))
        .sum();
    assert!(ok > 0, "RPCs crossed the QUIC network");
    let serving = nets
        .iter()
        .filter(|n| n.counters().served.load(Ordering::Relaxed) > 0)
        .count();
    assert!(serving >= 2, "at least the two followers served RPCs");

    let dead = nets[0]
        .call(NodeId(1), NodeId(9), "127.0.0.1:9", vec![0; 8])
        .await;
    assert!(
        matches!(dead, Err(DirectoryError::Unreachable { .. })),
        "{dead:?}"
    );
    for d in &dirs {
        d.shutdown().await.expect("shutdown");
    }
    for n in &nets {
        n.close();
    }
}

struct Answer;

impl ControlHandler for Answer {
    fn handle(
        &self,
        req: ControlRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ControlResponse> + Send + '_>> {
        Box::pin(async move {
            match req {
                ControlRequest::Replicate { from, .. } => ControlResponse::Replicated {
                    tier: format!("from-n{from}"),
                },
                ControlRequest::Usage => ControlResponse::Usage {
                    tiers: Vec::new(),
                    inbound: Vec::new(),
                    stats: None,
                },
                ControlRequest::Describe | ControlRequest::Drain => ControlResponse::Refused {
                    code: "test".into(),
                    message: "not served by the test handler".into(),
                },
                ControlRequest::Events { .. } | ControlRequest::BlockInfo { .. } => {
                    ControlResponse::Refused {
                        code: "unsupported".into(),
                        message: "not in this test".into(),
                    }
                }
            }
        })
    }
}

/// The control channel shares the Raft endpoint under its own ALPN; a peer whose certificate
/// another CA signed is refused in the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_calls_cross_mtls_and_a_foreign_ca_is_refused() {
    let certs = tempfile::tempdir().expect("tempdir");
    kvfabric_transport::generate_cluster(certs.path(), 2).expect("certs");
    let foreign = tempfile::tempdir().expect("tempdir");
    kvfabric_transport::generate_cluster(foreign.path(), 2).expect("certs");
    let bind = |dir: &std::path::Path, name: &str| {
        let id = NodeIdentity::load_from_dir(dir, name).expect("id");
        QuicRaftNet::bind(
            &id,
            "127.0.0.1:0".parse().unwrap(),
            1 << 20,
            Duration::from_millis(2_000),
        )
        .expect("bind")
    };
    let server = bind(certs.path(), "node2");
    let handlers = Arc::new(Handlers::default());
    let _ = handlers.control.set(Arc::new(Answer));
    server.serve(handlers);
    let addr = server.local_addr().expect("addr");
    let req = ControlRequest::Replicate {
        from: 1,
        namespace: kvfabric_store::NamespaceKey::derive("a"),
        block: kvfabric_store::BlockId([1; 32]),
    };
    let limit = Duration::from_secs(10);

    let client = bind(certs.path(), "node1");
    match client.control_call(NodeId(2), addr, &req, limit).await {
        Ok(ControlResponse::Replicated { tier }) => assert_eq!(tier, "from-n1"),
        other => panic!("expected an answer, found {other:?}"),
    }
    assert_eq!(server.counters().served.load(Ordering::Relaxed), 1);

    let stranger = bind(foreign.path(), "node1");
    let refused = stranger.control_call(NodeId(2), addr, &req, limit).await;
    assert!(
        matches!(refused, Err(ControlError::Unreachable { .. })),
        "{refused:?}"
    );
    for n in [&server, &client, &stranger] {
        n.close();
    }
}
