//! Raft and control over the node's one QUIC endpoint, on loopback with real sockets: three
//! directory members elect a leader and commit a join; a control request is answered; a peer
//! whose certificate another CA signed is refused in the handshake.

use super::*;
use kvfabric_directory::{Directory, ShardId, SystemClock};
use kvfabric_transport::{MemorySource, NodeIdentity, QuicTransport, Transport};

fn fast_config() -> DirectoryConfig {
    DirectoryConfig {
        heartbeat_interval_ms: 50,
        election_timeout_min_ms: 300,
        election_timeout_max_ms: 600,
        ..DirectoryConfig::default()
    }
}

async fn endpoint(dir: &std::path::Path, name: &str, channels: Vec<Channel>) -> Arc<QuicTransport> {
    let id = NodeIdentity::load_from_dir(dir, name).expect("identity");
    let t = QuicTransport::bind_with_channels(
        kvfabric_transport::TransportConfig::default(),
        &id,
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemorySource::new()),
        channels,
    )
    .await
    .expect("bind");
    Arc::new(t)
}

/// Three members over the Raft channel commit a join; the RPCs crossed QUIC; a member nobody
/// configured is unreachable, not hung on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_commit_over_the_raft_channel() {
    let certs = tempfile::tempdir().expect("tempdir");
    kvfabric_transport::generate_cluster(certs.path(), 3).expect("certs");
    let data = tempfile::tempdir().expect("tempdir");
    let config = fast_config();
    let mut eps = Vec::new();
    let mut peers = BTreeMap::new();
    for n in 1..=3u64 {
        let ep = endpoint(
            certs.path(),
            &format!("node{n}"),
            vec![raft_channel(&config)],
        )
        .await;
        peers.insert(NodeId(n), ep.local_peer());
        eps.push(ep);
    }
    let mut dirs = Vec::new();
    let mut nets = Vec::new();
    for (i, ep) in eps.iter().enumerate() {
        let id = NodeId(i as u64 + 1);
        let raft = Arc::new(RaftNet::new(ep.clone(), peers.clone(), &config));
        let dir = Directory::open(
            id,
            ShardId(0),
            &data.path().join(format!("n{}", id.0)),
            config.clone(),
            raft.clone(),
            Arc::new(SystemClock),
        )
        .await
        .expect("open");
        ep.serve(raft_channel(&config), raft.server(dir.rpc_server()))
            .expect("serve");
        dirs.push(dir);
        nets.push(raft);
    }
    let addrs = peers
        .iter()
        .map(|(id, p)| (*id, p.addr.to_string()))
        .collect();
    dirs[0].initialize(addrs).await.expect("initialize");
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
    assert!(ok > 0, "RPCs crossed the QUIC endpoint");
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
    for e in &eps {
        e.close().await;
    }
}

struct Usage;

impl MessageHandler for Usage {
    fn handle(&self, request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            let _: super::super::control::ControlRequest =
                super::super::control::decode(&request, "a request").ok()?;
            Some(super::super::control::encode(
                &super::super::control::ControlResponse::Usage {
                    tiers: Vec::new(),
                    inbound: Vec::new(),
                    stats: None,
                },
            ))
        })
    }
}

/// The control channel shares the endpoint under its own ALPN; a peer whose certificate
/// another CA signed is refused in the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_calls_cross_mtls_and_a_foreign_ca_is_refused() {
    use super::super::control::{decode, encode, ControlRequest, ControlResponse};
    let certs = tempfile::tempdir().expect("tempdir");
    kvfabric_transport::generate_cluster(certs.path(), 2).expect("certs");
    let foreign = tempfile::tempdir().expect("tempdir");
    kvfabric_transport::generate_cluster(foreign.path(), 2).expect("certs");
    let server = endpoint(certs.path(), "node2", vec![CONTROL_CHANNEL]).await;
    server
        .serve(CONTROL_CHANNEL, Arc::new(Usage))
        .expect("serve");
    let peer = server.local_peer();
    let limit = Duration::from_secs(10);
    let req = encode(&ControlRequest::Usage);

    let client = endpoint(certs.path(), "node1", vec![CONTROL_CHANNEL]).await;
    let answer = client
        .call(CONTROL_CHANNEL, &peer, req.clone(), limit)
        .await
        .expect("an answer");
    let answer: ControlResponse = decode(&answer, "a usage answer").expect("decodes");
    assert!(matches!(answer, ControlResponse::Usage { .. }));
    assert_eq!(server.counters().messages_served, 1);

    let stranger = endpoint(foreign.path(), "node1", vec![CONTROL_CHANNEL]).await;
    let refused = stranger.call(CONTROL_CHANNEL, &peer, req, limit).await;
    assert!(refused.is_err(), "{refused:?}");
    for t in [&server, &client, &stranger] {
        t.close().await;
    }
}

/// A messenger that never answers a call to node 1 and refuses every other at once.
struct Silent;

impl Messenger for Silent {
    fn serve(&self, _: Channel, _: Arc<dyn MessageHandler>) -> Result<(), TransportError> {
        Ok(())
    }

    fn call<'a>(
        &'a self,
        _channel: Channel,
        peer: &'a PeerAddr,
        _request: Vec<u8>,
        _limit: Duration,
    ) -> TransportFuture<'a, Result<Vec<u8>, TransportError>> {
        Box::pin(async move {
            if peer.name == "node1" {
                std::future::pending::<()>().await;
            }
            Err(TransportError::Timeout {
                peer: peer.clone(),
                what: "call",
                after_ms: 0,
            })
        })
    }
}

/// A call its caller drops before it ends (openraft's deadline on an AppendEntries) is
/// counted as abandoned, not as ok or failed; a call that fails is counted as failed only.
#[tokio::test]
async fn a_call_dropped_by_its_caller_is_counted_as_abandoned() {
    let config = DirectoryConfig::default();
    let peers = (1..=2u64)
        .map(|n| {
            let addr = format!("127.0.0.1:{}", 9000 + n).parse().unwrap();
            (NodeId(n), PeerAddr::new(format!("node{n}"), addr))
        })
        .collect();
    let net = RaftNet::new(Arc::new(Silent), peers, &config);
    let counters = net.counters();
    let dropped = tokio::time::timeout(
        Duration::from_millis(20),
        net.call(NodeId(9), NodeId(1), "", vec![1]),
    )
    .await;
    assert!(dropped.is_err(), "the silent peer never answers");
    assert!(net.call(NodeId(9), NodeId(2), "", vec![1]).await.is_err());
    let seen = |c: &AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(
        (
            seen(&counters.calls_ok),
            seen(&counters.calls_failed),
            seen(&counters.calls_abandoned)
        ),
        (0, 1, 1)
    );
}
