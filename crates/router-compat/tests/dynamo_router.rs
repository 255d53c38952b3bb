//! Dynamo's router (the published `dynamo-kv-router` crate) routing on kvfabric's KV events:
//! a real 3-node cluster publishes its events on one cluster-wide ZeroMQ socket (node 1's
//! cluster feed, each message under its member's topic); every payload goes through Dynamo's
//! own `zmq_wire::decode_event_batch` and `ZmqEventNormalizer` (decode, filter, convert) into
//! its `RadixTree`, and `find_matches` for a request's tokens ranks the node that holds the
//! request's blocks first, with the overlap in Dynamo's blocks (16-token engine pages); a
//! removal lowers a node's overlap; a node paused past its lease stops ranking and ranks again
//! once it joins again and re-announces; after a node is killed and its lease expires, the feed
//! clears it and it no longer ranks.
//!
//! Dynamo's full indexer sends events of lower tiers (kvfabric's host tier is `CPU`) to its
//! lower-tier indexes; here every converted event goes to one radix tree, the structure whose
//! ranking is under test.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dynamo_kv_router::protocols::{compute_block_hash_for_seq, BlockHashOptions, WorkerWithDpRank};
use dynamo_kv_router::zmq_wire::{decode_event_batch, ZmqEventNormalizer};
use dynamo_kv_router::RadixTree;
use kvfabric_test_support::harness::cluster::Cluster;
use kvfabric_test_support::harness::{init_tracing, Kvfabric};
use kvfabric_test_support::presets::{builtin, payload};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// A 64-token MLA preset: one kvfabric block is four of Dynamo's (and vLLM's) 16-token pages.
const MODEL: &str = "deepseek-v2-lite";
/// Tokens per engine page, and Dynamo's `kv_block_size`.
const PAGE_TOKENS: u32 = 16;
/// Longest wait for the feed to carry a change (polls every 200 ms; a loaded machine).
const WAIT: Duration = Duration::from_secs(90);

/// The `kvfabric` binary: `KVFABRIC_BIN`, else the one beside this test's `deps/` directory
/// (`cargo test --workspace` builds it; `cargo build -p kvfabric-node` otherwise).
fn kvfabric() -> Kvfabric {
    let path = std::env::var_os("KVFABRIC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("the test's path");
            exe.parent()
                .and_then(|deps| deps.parent())
                .expect("target/<profile>/deps")
                .join("kvfabric")
        });
    assert!(
        path.is_file(),
        "no kvfabric binary at {}: run `cargo build -p kvfabric-node` or set KVFABRIC_BIN",
        path.display()
    );
    Kvfabric::at(path)
}

/// The endpoint node `id` logged for `what` (its latest start's).
fn endpoint(cluster: &Cluster, id: u64, what: &str) -> String {
    cluster.wait_for(what, || {
        cluster
            .log(id)
            .lines()
            .rev()
            .find(|l| l.contains(what))
            .and_then(|l| l.split("endpoint=").nth(1))
            .map(|e| e.split_whitespace().next().unwrap().to_owned())
    })
}

/// Every member's buffered batches of the feed, by vLLM's replay protocol with no topic:
/// `(topic, seq, payload)` until the end marker.
async fn replay(endpoint: &str) -> Vec<(String, u64, Bytes)> {
    let mut dealer = DealerSocket::new();
    dealer.connect(endpoint).await.unwrap();
    let req = vec![Bytes::new(), Bytes::copy_from_slice(&0u64.to_be_bytes())];
    dealer
        .send(ZmqMessage::try_from(req).unwrap())
        .await
        .unwrap();
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(30), dealer.recv())
            .await
            .expect("a replay answer in time")
            .unwrap()
            .into_vec();
        let seq = i64::from_be_bytes(m[2][..].try_into().unwrap());
        if seq == -1 {
            return out;
        }
        out.push((
            String::from_utf8(m[1].to_vec()).unwrap(),
            seq as u64,
            m[3].clone(),
        ));
    }
}

/// A Dynamo router's view: its normalizer and radix tree, fed member by member in order.
struct Router {
    normalizer: ZmqEventNormalizer,
    tree: RadixTree,
    /// The next sequence number applied per topic.
    next: BTreeMap<String, u64>,
    event_id: u64,
    /// Payloads applied, by (topic, seq), to compare with what the PUB socket sent.
    seen: BTreeMap<(String, u64), Bytes>,
}

impl Router {
    fn new() -> Router {
        Router {
            normalizer: ZmqEventNormalizer::new(PAGE_TOKENS),
            tree: RadixTree::new(),
            next: BTreeMap::new(),
            event_id: 0,
            seen: BTreeMap::new(),
        }
    }

    /// Applies one member's batch through Dynamo's decode-and-convert path.
    fn apply(&mut self, topic: &str, seq: u64, payload: &Bytes) {
        let worker: u64 = topic
            .strip_prefix("kvfabric.n")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a member topic, found {topic:?}"));
        let batch = decode_event_batch(payload).expect("Dynamo decodes kvfabric's payload");
        let dp = batch.data_parallel_rank.unwrap_or(0) as u32;
        let w = WorkerWithDpRank::new(worker, dp);
        for raw in batch.events {
            self.event_id += 1;
            let placement = self
                .normalizer
                .normalize(raw, self.event_id, w)
                .expect("Dynamo keeps kvfabric's event (local, known medium, main attention)");
            let event = placement.into_router_event().expect("a worker's own event");
            self.tree
                .apply_event(event)
                .expect("Dynamo's indexer applies kvfabric's event");
        }
        self.next.insert(topic.to_owned(), seq + 1);
        self.seen.insert((topic.to_owned(), seq), payload.clone());
    }

    /// Applies what the feed has that this router has not, in each member's order.
    fn catch_up(&mut self, rt: &tokio::runtime::Runtime, endpoint: &str) {
        for (topic, seq, payload) in rt.block_on(replay(endpoint)) {
            let next = self.next.get(&topic).copied().unwrap_or(0);
            if seq >= next {
                assert_eq!(seq, next, "{topic}: gap-free per member");
                self.apply(&topic, seq, &payload);
            }
        }
    }

    /// `find_matches` for `tokens`: (node, overlap in pages), best first.
    fn ranking(&self, tokens: &[u32]) -> Vec<(u64, u32)> {
        let hashes = compute_block_hash_for_seq(tokens, PAGE_TOKENS, BlockHashOptions::default());
        let scores = self.tree.find_matches(hashes, false);
        let mut out: Vec<(u64, u32)> = scores
            .scores
            .iter()
            .filter(|(_, s)| **s > 0)
            .map(|(w, s)| (w.worker_id, *s))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

/// The engine headers of block `b` of the request `tokens`: four 16-token pages with the
/// engine's (here synthetic, chained) hashes, their parent, and the block's token ids.
fn engine_headers(tokens: &[u32], b: usize, block_tokens: usize) -> Vec<(&'static str, String)> {
    let pages = block_tokens / PAGE_TOKENS as usize;
    let hash = |page: usize| format!("i:{}", 0xE000_0000_0000_0000u64 + page as u64);
    let first = b * pages;
    let mut h = vec![
        ("kvfabric-engine", "vllm/0.33.0".to_owned()),
        (
            "kvfabric-engine-block-hashes",
            (first..first + pages)
                .map(hash)
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("kvfabric-engine-page-tokens", PAGE_TOKENS.to_string()),
        (
            "kvfabric-engine-token-ids",
            tokens[b * block_tokens..(b + 1) * block_tokens]
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
    ];
    if first > 0 {
        h.push(("kvfabric-engine-parent-hash", hash(first - 1)));
    }
    h
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn dynamo_routes_a_request_to_the_kvfabric_node_holding_its_blocks() {
    init_tracing();
    let g = builtin(MODEL);
    let n = g.block_tokens() as usize;
    tracing::info!("phase 1: three nodes, replication 1, node 1 runs the cluster feed");
    let cluster = kvfabric().cluster_with(
        3,
        &[
            "--replication",
            "1",
            "--cluster-set",
            "lease_ms=3000",
            "--events-set",
            "cluster_zmq_pub=\"tcp://127.0.0.1:0\"",
            "--events-set",
            "cluster_zmq_replay=\"tcp://127.0.0.1:0\"",
        ],
    );
    cluster.agreed_leader(&[1, 2, 3]);
    let pub_ep = endpoint(&cluster, 1, "ZeroMQ cluster publisher bound");
    let replay_ep = endpoint(&cluster, 1, "ZeroMQ cluster replay bound");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut sub = rt.block_on(async {
        let mut s = SubSocket::new();
        s.connect(&pub_ep).await.unwrap();
        s.subscribe("").await.unwrap();
        s
    });
    std::thread::sleep(Duration::from_millis(500));

    tracing::info!("phase 2: an engine on n2 puts a request's 4 blocks, one on n3 its first 2");
    let tokens: Vec<u32> = (0..4 * n as u32).map(|t| 7_000 + t * 3).collect();
    let put = |node: u64, b: usize, seed: u64| {
        let h = engine_headers(&tokens, b, n);
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = cluster.put_block(node, &g, &payload(&g, seed), &h);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        r.json()["block"].as_str().unwrap().to_owned()
    };
    for b in 0..4 {
        put(2, b, 100 + b as u64);
    }
    put(3, 0, 200);
    let second_on_3 = put(3, 1, 201);
    // A block put without engine metadata (no token ids): Dynamo decodes and applies it, and
    // it indexes nothing a request could match.
    let r = cluster.put_block(1, &g, &payload(&g, 300), &[]);
    assert_eq!(r.status, 201);

    let pages = (n / PAGE_TOKENS as usize) as u32;
    let mut router = Router::new();
    wait_until("the feed to carry every put", || {
        router.catch_up(&rt, &replay_ep);
        router.ranking(&tokens) == [(2, 4 * pages), (3, 2 * pages)]
    });
    assert!(router.next.contains_key("kvfabric.n1"), "{:?}", router.next);
    // A request sharing only the first block's tokens overlaps both by one block.
    assert_eq!(
        router.ranking(&tokens[..n]),
        [(2, pages), (3, pages)],
        "ties by node"
    );
    // What the PUB socket sent live is what the router applied from the replay.
    rt.block_on(async {
        let deadline = Instant::now() + WAIT;
        loop {
            let m = tokio::time::timeout(Duration::from_secs(30), sub.recv())
                .await
                .expect("the cluster PUB socket sends")
                .unwrap()
                .into_vec();
            let topic = String::from_utf8(m[0].to_vec()).unwrap();
            let seq = u64::from_be_bytes(m[1][..].try_into().unwrap());
            if let Some(p) = router.seen.get(&(topic.clone(), seq)) {
                assert_eq!(p, &m[2], "{topic} {seq}");
                if topic == "kvfabric.n2" {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "no live batch of n2 heard");
        }
    });

    tracing::info!("phase 3: n3 deletes its second block; its overlap drops to one block");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let r = agent
        .delete(format!("{}/v1/blocks/{second_on_3}", cluster.api(3)))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    wait_until("the removal to reach the router", || {
        router.catch_up(&rt, &replay_ep);
        router.ranking(&tokens) == [(2, 4 * pages), (3, pages)]
    });

    tracing::info!(
        "phase 4: SIGSTOP n3 past its lease: cleared; SIGCONT: it joins again and re-announces"
    );
    let signal = |sig: &str, id: u64| {
        let ok = std::process::Command::new("kill")
            .args([sig, &cluster.pid(id).to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} n{id}");
    };
    signal("-STOP", 3);
    wait_until("the paused n3 to stop ranking", || {
        router.catch_up(&rt, &replay_ep);
        router.ranking(&tokens) == [(2, 4 * pages)]
    });
    signal("-CONT", 3);
    wait_until("n3 to rank again after its re-announcement", || {
        router.catch_up(&rt, &replay_ep);
        router.ranking(&tokens) == [(2, 4 * pages), (3, pages)]
    });

    tracing::info!("phase 5: SIGKILL n2; once its lease expires the feed clears it");
    cluster.kill(2);
    wait_until("n2 to stop ranking", || {
        router.catch_up(&rt, &replay_ep);
        router.ranking(&tokens) == [(3, pages)]
    });
}
