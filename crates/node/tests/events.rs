//! KV events end to end on real node processes: `GET /v1/events` (Server-Sent Events) with
//! replay, `Last-Event-ID`, tenancy and its subscriber bound, and the vLLM-compatible ZeroMQ
//! stream read by a test consumer that decodes the msgpack batches into typed events, replays
//! through the ROUTER socket, and rebuilds a node's state across a restart.

mod common;
mod events_client;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{payload, tiny, Options, TestNode, TOKEN_A, TOKEN_B, TOKEN_DOCS};
use events_client::{blocks, Sse, EVENT_TIMEOUT};
use rmpv::Value;
use serde_json::Value as Json;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// Node options with an `[events]` section (appended after `[limits]`).
fn with_events(base: Options, events: &str) -> Options {
    Options {
        limits: format!("{}\n\n[events]\n{events}", base.limits),
        ..base
    }
}

/// Opens `GET /v1/events{query}` on `node`.
fn open(
    node: &TestNode,
    token: Option<&str>,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, (u16, Json)> {
    events_client::open(&node.url, token, query, headers)
}

fn put(node: &TestNode, token: Option<&str>, seed: u64) -> String {
    let g = tiny();
    node.put(token, &g, &payload(&g, seed), &[]).block()
}

#[test]
fn the_stream_shows_stored_and_removed_with_node_and_tier_and_gap_free_seqs() {
    let node = TestNode::start(Options {
        tenants: false,
        ..Options::default()
    });
    let mut s = open(&node, None, "?since=0", &[]).unwrap();
    let first = s.next();
    assert_eq!(first.event, "epoch");
    assert_eq!(first.data["node"], "n1");
    assert_eq!(first.data["seq"], 0);
    let epoch = first.data["epoch"].as_u64().unwrap();
    assert!(epoch >= 1);
    assert_eq!(first.id.as_deref(), Some(format!("{epoch}:0").as_str()));

    let key = "ab".repeat(32);
    let g = tiny();
    let id = node
        .put(None, &g, &payload(&g, 1), &[("kvfabric-chunk-key", &key)])
        .block();
    let id2 = put(&node, None, 2);
    assert_eq!(node.delete(None, &format!("/v1/blocks/{id}")).status, 204);
    // Deleting it again changes nothing and publishes nothing.
    assert_eq!(node.delete(None, &format!("/v1/blocks/{id}")).status, 404);
    // A second put of held bytes is not a change either.
    assert_eq!(put(&node, None, 2), id2);
    let id3 = put(&node, None, 3);

    let got = s.take(4);
    let names: Vec<&str> = got.iter().map(|m| m.event.as_str()).collect();
    assert_eq!(names, ["stored", "stored", "removed", "stored"]);
    for (i, m) in got.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(m.data["seq"], seq, "{m:?}");
        assert_eq!(m.data["epoch"], epoch);
        assert_eq!(m.data["node"], "n1");
        assert_eq!(m.data["tier"], "host", "{m:?}");
        assert_eq!(m.id.as_deref(), Some(format!("{epoch}:{seq}").as_str()));
    }
    assert_eq!(blocks(&got[0]), std::slice::from_ref(&id));
    assert_eq!(got[0].data["chunk_key"], key);
    assert_eq!(got[0].data["block_tokens"], g.block_tokens());
    assert_eq!(blocks(&got[1]), [id2]);
    assert_eq!(got[1].data["chunk_key"], Json::Null);
    assert_eq!(blocks(&got[2]), [id]);
    assert_eq!(blocks(&got[3]), [id3]);
    assert_eq!(
        node.metric("kvfabric_events_published_total{node=\"n1\"}"),
        5.0
    );
    assert_eq!(node.metric("kvfabric_event_subscribers{node=\"n1\"}"), 1.0);

    // SIGTERM ends open streams: the node exits cleanly and the client sees the end.
    let mut node = node;
    assert!(node.terminate().success());
    assert!(s.ends());
}

#[test]
fn a_demotion_is_removed_from_one_tier_and_stored_in_the_next() {
    let g = tiny();
    let node = TestNode::start(Options {
        host_bytes: g.block_layout().payload_len + 64,
        disk_bytes: Some(16 << 20),
        tenants: false,
        ..Options::default()
    });
    let mut s = open(&node, None, "?since=1", &[]).unwrap();
    let a = put(&node, None, 1);
    let b = put(&node, None, 2);
    let got: Vec<(String, Json, Vec<String>, u64)> = s
        .take(4)
        .iter()
        .map(|m| {
            (
                m.event.clone(),
                m.data["tier"].clone(),
                blocks(m),
                m.data["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    let host = Json::from("host");
    let disk = Json::from("disk");
    assert_eq!(
        got,
        [
            ("stored".to_owned(), host.clone(), vec![a.clone()], 1),
            ("removed".to_owned(), host.clone(), vec![a.clone()], 2),
            ("stored".to_owned(), disk, vec![a], 2),
            ("stored".to_owned(), host, vec![b], 3),
        ]
    );
    assert!(node.metric("kvfabric_demotions_total{node=\"n1\"}") >= 1.0);
}

#[test]
fn replay_from_since_and_last_event_id_and_refusals() {
    let node = TestNode::start(with_events(
        Options {
            tenants: false,
            ..Options::default()
        },
        "ring_batches = 4",
    ));
    let ids: Vec<String> = (1..=3).map(|seed| put(&node, None, seed)).collect();
    let epoch = open(&node, None, "?since=0", &[]).unwrap().next().data["epoch"]
        .as_u64()
        .unwrap();

    // From seq 2: the second and third puts.
    let mut s = open(&node, None, "?since=2", &[]).unwrap();
    let got = s.take(2);
    assert_eq!(
        (got[0].data["seq"].as_u64(), blocks(&got[0])),
        (Some(2), vec![ids[1].clone()])
    );
    assert_eq!(
        (got[1].data["seq"].as_u64(), blocks(&got[1])),
        (Some(3), vec![ids[2].clone()])
    );

    // Last-Event-ID resumes after the batch it names.
    let last = format!("{epoch}:2");
    let mut s = open(&node, None, "", &[("last-event-id", &last)]).unwrap();
    assert_eq!(s.next().data["seq"], 3);
    // An earlier epoch's id: the whole current epoch, from its announcement.
    let mut from_old = open(&node, None, "", &[("last-event-id", "0:40")]).unwrap();
    let m = from_old.next();
    assert_eq!(
        (m.event.as_str(), m.data["seq"].as_u64()),
        ("epoch", Some(0))
    );
    // Then live: a new put reaches the resumed stream.
    let id4 = put(&node, None, 4);
    let m = s.next();
    assert_eq!((m.data["seq"].as_u64(), blocks(&m)), (Some(4), vec![id4]));

    // A ring of 4 lost seq 0 once seq 4 was published: 410 naming the oldest.
    let (status, body) = open(&node, None, "?since=0", &[]).err().unwrap();
    assert_eq!(status, 410);
    assert_eq!(body["error"]["code"], "replay_gap");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("oldest available is 1"),
        "{body}"
    );
    for bad in [
        "?since=-1",
        "?since=abc",
        "?since=",
        "?since=99999999999999999999",
        "?from=1",
    ] {
        let (status, body) = open(&node, None, bad, &[]).err().unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_query")),
            "{bad}"
        );
    }
    for bad in ["7", "x:1", "1:-1"] {
        let (status, body) = open(&node, None, "", &[("last-event-id", bad)])
            .err()
            .unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_header")),
            "{bad}"
        );
    }
    let future = format!("{}:0", epoch + 1);
    let (status, _) = open(&node, None, "", &[("last-event-id", &future)])
        .err()
        .unwrap();
    assert_eq!(status, 400);
    assert!(node.metric("kvfabric_event_replays_total{node=\"n1\"}") >= 3.0);
    assert!(node.metric("kvfabric_event_replay_gaps_total{node=\"n1\"}") >= 1.0);
    node.assert_serving(99);
}

#[test]
fn a_tenant_sees_only_namespaces_it_may_read_and_streams_are_bounded() {
    let node = TestNode::start(with_events(Options::default(), "max_sse_subscribers = 2"));
    let (status, body) = open(&node, None, "", &[]).err().unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("missing_token"))
    );
    let (status, _) = open(&node, Some(TOKEN_A), "", &[("kvfabric-namespace", "b")])
        .err()
        .unwrap();
    assert_eq!(status, 403);

    let mut a = open(&node, Some(TOKEN_A), "?since=0", &[]).unwrap();
    let mut b = open(&node, Some(TOKEN_B), "?since=0", &[]).unwrap();
    // The bound: a third stream is refused.
    let (status, body) = open(&node, Some(TOKEN_A), "", &[]).err().unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("too_many_subscribers"))
    );
    assert_eq!(node.metric("kvfabric_event_subscribers{node=\"n1\"}"), 2.0);
    assert_eq!(
        node.metric("kvfabric_event_subscribers_refused_total{node=\"n1\"}"),
        1.0
    );

    let of_b = put(&node, Some(TOKEN_B), 1);
    let of_a = put(&node, Some(TOKEN_A), 2);
    let of_docs = put(&node, Some(TOKEN_DOCS), 3);
    assert_eq!(
        node.delete(Some(TOKEN_B), &format!("/v1/blocks/{of_b}"))
            .status,
        204
    );
    let last_of_a = put(&node, Some(TOKEN_A), 4);

    // Both see the epoch; A sees its own and the shared namespace's blocks, never B's.
    assert_eq!(a.next().event, "epoch");
    let seen: Vec<(String, Vec<String>, u64)> = a
        .take(3)
        .iter()
        .map(|m| (m.event.clone(), blocks(m), m.data["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("stored".to_owned(), vec![of_a], 2),
            ("stored".to_owned(), vec![of_docs.clone()], 3),
            ("stored".to_owned(), vec![last_of_a], 5),
        ]
    );
    assert_eq!(b.next().event, "epoch");
    let seen: Vec<(String, Vec<String>)> = b
        .take(3)
        .iter()
        .map(|m| (m.event.clone(), blocks(m)))
        .collect();
    assert_eq!(
        seen,
        [
            ("stored".to_owned(), vec![of_b.clone()]),
            ("stored".to_owned(), vec![of_docs]),
            ("removed".to_owned(), vec![of_b]),
        ]
    );
}

/// One decoded vLLM KV event.
#[derive(Debug, Clone, PartialEq)]
enum KvEvent {
    Stored {
        hashes: Vec<Vec<u8>>,
        block_size: u64,
        medium: Option<String>,
    },
    Removed {
        hashes: Vec<Vec<u8>>,
        medium: Option<String>,
    },
    AllCleared,
}

/// Decodes one `KVEventBatch` payload: `[ts, [event, …], data_parallel_rank]`.
fn decode(payload: &[u8]) -> (f64, Vec<KvEvent>) {
    let v = rmpv::decode::read_value(&mut &payload[..]).expect("msgpack");
    let batch = v.as_array().expect("a batch is an array");
    assert!(batch.len() == 2 || batch.len() == 3, "{v}");
    let ts = batch[0].as_f64().expect("ts is a float");
    if let Some(rank) = batch.get(2) {
        assert!(rank.is_nil() || rank.is_u64(), "{v}");
    }
    let hashes = |h: &Value| -> Vec<Vec<u8>> {
        h.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_slice().expect("a block hash is bytes").to_vec())
            .collect()
    };
    let medium = |m: &Value| m.as_str().map(str::to_owned);
    let events = batch[1]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            let f = e.as_array().expect("an event is a tagged array");
            match f[0].as_str().expect("tag") {
                "BlockStored" => {
                    assert_eq!(f.len(), 7, "{e}");
                    assert!(f[2].is_nil() && f[5].is_nil(), "{e}");
                    assert!(f[3].as_array().unwrap().is_empty(), "{e}");
                    KvEvent::Stored {
                        hashes: hashes(&f[1]),
                        block_size: f[4].as_u64().unwrap(),
                        medium: medium(&f[6]),
                    }
                }
                "BlockRemoved" => {
                    assert_eq!(f.len(), 3, "{e}");
                    KvEvent::Removed {
                        hashes: hashes(&f[1]),
                        medium: medium(&f[2]),
                    }
                }
                "AllBlocksCleared" => KvEvent::AllCleared,
                other => panic!("unknown event {other}"),
            }
        })
        .collect();
    (ts, events)
}

/// The endpoint a node logged for one of its ZeroMQ sockets (the latest start's).
fn zmq_endpoint(node: &TestNode, what: &str) -> String {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let log = node.log();
        let found = log
            .lines()
            .rev()
            .find(|l| l.contains(what))
            .and_then(|l| l.split("endpoint=").nth(1))
            .map(|e| e.split_whitespace().next().unwrap().to_owned());
        if let Some(e) = found {
            return e;
        }
        assert!(Instant::now() < deadline, "no {what} in the log:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A vLLM-style consumer's view of one node: the block hashes it holds, rebuilt from batches.
#[derive(Default)]
struct Consumer {
    held: BTreeSet<String>,
    next_seq: u64,
}

impl Consumer {
    fn apply(&mut self, seq: u64, events: &[KvEvent]) {
        assert_eq!(seq, self.next_seq, "gap-free sequence numbers");
        self.next_seq = seq + 1;
        for e in events {
            match e {
                KvEvent::AllCleared => self.held.clear(),
                KvEvent::Stored { hashes, .. } => self.held.extend(hashes.iter().map(|h| hex(h))),
                KvEvent::Removed { hashes, .. } => {
                    for h in hashes {
                        self.held.remove(&hex(h));
                    }
                }
            }
        }
    }
}

/// Asks the replay socket for every batch from `start`: `(seq, payload)` until the end marker.
async fn replay(endpoint: &str, start: u64) -> Vec<(u64, Vec<u8>)> {
    let mut dealer = DealerSocket::new();
    dealer.connect(endpoint).await.unwrap();
    let req = ZmqMessage::try_from(vec![
        bytes::Bytes::new(),
        bytes::Bytes::copy_from_slice(&start.to_be_bytes()),
    ])
    .unwrap();
    dealer.send(req).await.unwrap();
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout(EVENT_TIMEOUT, dealer.recv())
            .await
            .expect("a replay answer in time")
            .unwrap()
            .into_vec();
        assert_eq!(m.len(), 3, "[\"\", seq, payload]");
        assert!(m[0].is_empty());
        let seq = i64::from_be_bytes(m[1][..].try_into().unwrap());
        if seq == -1 {
            assert!(m[2].is_empty());
            return out;
        }
        out.push((seq as u64, m[2].to_vec()));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

const ZMQ_EVENTS: &str = "zmq_pub = \"tcp://127.0.0.1:0\"\nzmq_replay = \"tcp://127.0.0.1:0\"";

#[test]
fn a_zmq_consumer_decodes_published_batches_and_replays_through_the_router() {
    let node = TestNode::start(with_events(
        Options {
            tenants: false,
            ..Options::default()
        },
        ZMQ_EVENTS,
    ));
    let pub_ep = zmq_endpoint(&node, "ZeroMQ publisher bound");
    let replay_ep = zmq_endpoint(&node, "ZeroMQ replay bound");
    let rt = runtime();
    let mut sub = rt.block_on(async {
        let mut sub = SubSocket::new();
        sub.connect(&pub_ep).await.unwrap();
        sub.subscribe("").await.unwrap();
        sub
    });
    // A PUB drops what it sends before the subscription arrived: put until the consumer
    // hears something, then fill what it missed from the replay socket, as vLLM consumers do.
    let mut put_ids = Vec::new();
    let first = rt.block_on(async {
        for seed in 1..=200u64 {
            put_ids.push(put(&node, None, seed));
            if let Ok(m) = tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
                return m.unwrap().into_vec();
            }
        }
        panic!("the subscriber heard nothing");
    });
    assert_eq!(first.len(), 3, "[topic, seq, payload]");
    assert_eq!(&first[0][..], b"kvfabric.n1");
    let first_seq = u64::from_be_bytes(first[1][..].try_into().unwrap());
    assert!(first_seq >= 1);

    let mut c = Consumer::default();
    let missed = rt.block_on(replay(&replay_ep, 0));
    assert_eq!(
        node.metric("kvfabric_event_replays_total{node=\"n1\"}"),
        1.0
    );
    for (seq, payload) in missed.iter().take_while(|(s, _)| *s < first_seq) {
        c.apply(*seq, &decode(payload).1);
    }
    let (ts, events) = decode(&first[2]);
    assert!(ts > 1.6e9, "a Unix timestamp: {ts}");
    c.apply(first_seq, &events);
    // The first batch of the epoch cleared a fresh node's (empty) state.
    assert_eq!(decode(&missed[0].1).1, [KvEvent::AllCleared]);

    // Live: a delete and a put, decoded with their fields.
    let gone = put_ids[0].clone();
    assert_eq!(node.delete(None, &format!("/v1/blocks/{gone}")).status, 204);
    let fresh = put(&node, None, 1000);
    put_ids.push(fresh.clone());
    let live: Vec<(u64, Vec<KvEvent>)> = rt.block_on(async {
        let mut out = Vec::new();
        for _ in 0..2 {
            let m = tokio::time::timeout(EVENT_TIMEOUT, sub.recv())
                .await
                .expect("a published batch in time")
                .unwrap()
                .into_vec();
            assert_eq!(&m[0][..], b"kvfabric.n1");
            out.push((
                u64::from_be_bytes(m[1][..].try_into().unwrap()),
                decode(&m[2]).1,
            ));
        }
        out
    });
    assert_eq!(
        live[0].1,
        [KvEvent::Removed {
            hashes: vec![hex_bytes(&gone)],
            medium: Some("CPU".into()),
        }]
    );
    assert_eq!(
        live[1].1,
        [KvEvent::Stored {
            hashes: vec![hex_bytes(&fresh)],
            block_size: u64::from(tiny().block_tokens()),
            medium: Some("CPU".into()),
        }]
    );
    for (seq, events) in &live {
        c.apply(*seq, events);
    }
    let expected: BTreeSet<String> = put_ids.iter().filter(|i| **i != gone).cloned().collect();
    assert_eq!(c.held, expected);

    // Malformed replay requests are counted and ignored; the socket still serves.
    rt.block_on(async {
        let mut dealer = DealerSocket::new();
        dealer.connect(&replay_ep).await.unwrap();
        dealer
            .send(ZmqMessage::from(b"nonsense".to_vec()))
            .await
            .unwrap();
    });
    let all = rt.block_on(replay(&replay_ep, 0));
    assert_eq!(all.len() as u64, c.next_seq);
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while node.metric("kvfabric_event_zmq_bad_requests_total{node=\"n1\"}") < 1.0 {
        assert!(Instant::now() < deadline, "the bad request was not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    node.assert_serving(4242);
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_restarted_node_announces_a_new_epoch_and_consumers_rebuild_its_state() {
    let g = tiny();
    let block = g.block_layout().payload_len + 64;
    // One block of RAM: every put demotes the previous block to disk, which survives a kill.
    let mut node = TestNode::start(with_events(
        Options {
            host_bytes: block,
            disk_bytes: Some(16 << 20),
            tenants: false,
            ..Options::default()
        },
        ZMQ_EVENTS,
    ));
    let ids: Vec<String> = (1..=3).map(|seed| put(&node, None, seed)).collect();
    let rt = runtime();
    let mut c = Consumer::default();
    for (seq, payload) in rt.block_on(replay(&zmq_endpoint(&node, "ZeroMQ replay bound"), 0)) {
        c.apply(seq, &decode(&payload).1);
    }
    assert_eq!(c.held, ids.iter().cloned().collect());
    let epoch = open(&node, None, "?since=0", &[]).unwrap().next().data["epoch"]
        .as_u64()
        .unwrap();

    node.kill();
    node.restart();

    // SSE: the new epoch is announced in seq 0, and an old Last-Event-ID resumes from it.
    let last = format!("{epoch}:3");
    let mut s = open(&node, None, "", &[("last-event-id", &last)]).unwrap();
    let announced = s.next();
    assert_eq!(announced.event, "epoch");
    assert_eq!(announced.data["seq"], 0);
    let new_epoch = announced.data["epoch"].as_u64().unwrap();
    assert!(new_epoch > epoch, "{new_epoch} after {epoch}");
    let recovered = s.next();
    assert_eq!(recovered.event, "stored");
    assert_eq!(recovered.data["tier"], "disk");
    assert_eq!(
        recovered.id.as_deref(),
        Some(format!("{new_epoch}:0").as_str())
    );

    // ZeroMQ: the consumer sees seq restart at 0 with AllBlocksCleared, then what the node
    // holds after recovery; applying it leaves exactly the recovered blocks (the one in RAM
    // at the kill is gone).
    let batches = rt.block_on(replay(&zmq_endpoint(&node, "ZeroMQ replay bound"), 0));
    let (seq, payload) = &batches[0];
    assert_eq!(*seq, 0);
    let events = decode(payload).1;
    assert_eq!(events[0], KvEvent::AllCleared);
    assert!(events[1..]
        .iter()
        .all(|e| matches!(e, KvEvent::Stored { medium: Some(m), .. } if m == "DISK")));
    c.next_seq = 0;
    for (seq, payload) in &batches {
        c.apply(*seq, &decode(payload).1);
    }
    assert_eq!(c.held, ids[..2].iter().cloned().collect());
    assert_eq!(
        blocks(&recovered).into_iter().collect::<BTreeSet<_>>(),
        c.held
    );
    for id in &ids[..2] {
        assert_eq!(node.get(None, &format!("/v1/blocks/{id}"), &[]).status, 200);
    }
}
