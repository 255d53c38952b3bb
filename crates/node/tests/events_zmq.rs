//! The ZeroMQ event sockets on real node processes, kvfabric-specific checks (the framing of
//! vLLM's `ZmqEventPublisher`, sequence numbers, replay, restarts; the payload read as generic
//! msgpack): a consumer subscribes to the PUB socket, fills what it missed through the ROUTER
//! replay socket, and rebuilds a node's state, across a restart too (a new epoch: sequence
//! numbers from 0, `AllBlocksCleared` first); a bad `[events]` config or a taken port stops
//! the node with its reason. That vLLM's and Dynamo's own decoders accept the payload is shown
//! by `python/tests/test_events_wire.py` and `crates/router-compat`.

mod common;
mod events_client;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{tiny, Options};
use events_client::node::{put, with_events, zmq_endpoint};
use events_client::zmq::{events, fallback_hash, replay, runtime, Held, Seen};
use events_client::{blocks, open, EVENT_TIMEOUT};
use zeromq::{DealerSocket, ReqSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

const ZMQ_EVENTS: &str = "zmq_pub = \"tcp://127.0.0.1:0\"\nzmq_replay = \"tcp://127.0.0.1:0\"";

#[test]
fn a_zmq_consumer_decodes_published_batches_and_replays_through_the_router() {
    let node = common::kvfabric().node(with_events(
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

    let mut c = Held::default();
    let missed = rt.block_on(replay(&replay_ep, None, 0));
    assert_eq!(
        node.metric("kvfabric_event_replays_total{node=\"n1\"}"),
        1.0
    );
    assert!(missed.iter().all(|(topic, _, _)| topic == "kvfabric.n1"));
    for (_, seq, payload) in missed.iter().take_while(|(_, s, _)| *s < first_seq) {
        c.apply(*seq, &events(payload).1);
    }
    let (ts, first_events) = events(&first[2]);
    assert!(ts > 1.6e9, "a Unix timestamp: {ts}");
    c.apply(first_seq, &first_events);
    // The first batch of the epoch cleared a fresh node's (empty) state.
    assert_eq!(events(&missed[0].2).1[0].kind, "AllBlocksCleared");
    // The batch heard first may be an earlier put's, late on a loaded machine: the batches
    // of the puts after it are taken too, so the live phase below hears only its own.
    let put_so_far: BTreeSet<u64> = put_ids.iter().map(|i| fallback_hash(i)).collect();
    rt.block_on(async {
        while !put_so_far.is_subset(&c.hashes) {
            let m = tokio::time::timeout(EVENT_TIMEOUT, sub.recv())
                .await
                .expect("every put's batch published in time")
                .unwrap()
                .into_vec();
            c.apply(
                u64::from_be_bytes(m[1][..].try_into().unwrap()),
                &events(&m[2]).1,
            );
        }
    });

    // Live: a delete and a put, decoded with their fields.
    let gone = put_ids[0].clone();
    assert_eq!(node.delete(None, &format!("/v1/blocks/{gone}")).status, 204);
    let fresh = put(&node, None, 1000);
    put_ids.push(fresh.clone());
    let live: Vec<(u64, Vec<Seen>)> = rt.block_on(async {
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
                events(&m[2]).1,
            ));
        }
        out
    });
    assert_eq!(
        live[0].1,
        [Seen {
            kind: "BlockRemoved".into(),
            hashes: vec![fallback_hash(&gone)],
            medium: Some("CPU".into()),
        }]
    );
    assert_eq!(
        live[1].1,
        [Seen {
            kind: "BlockStored".into(),
            hashes: vec![fallback_hash(&fresh)],
            medium: Some("CPU".into()),
        }]
    );
    for (seq, evs) in &live {
        c.apply(*seq, evs);
    }
    let expected: BTreeSet<u64> = put_ids
        .iter()
        .filter(|i| **i != gone)
        .map(|i| fallback_hash(i))
        .collect();
    assert_eq!(c.hashes, expected);

    // Malformed replay requests are counted and ignored; the socket still serves.
    rt.block_on(async {
        let mut dealer = DealerSocket::new();
        dealer.connect(&replay_ep).await.unwrap();
        dealer
            .send(ZmqMessage::from(b"nonsense".to_vec()))
            .await
            .unwrap();
    });
    let all = rt.block_on(replay(&replay_ep, None, 0));
    assert_eq!(all.len() as u64, c.next_seq);
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while node.metric("kvfabric_event_zmq_bad_requests_total{node=\"n1\"}") < 1.0 {
        assert!(Instant::now() < deadline, "the bad request was not counted");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A REQ socket: one 8-byte request frame; asking from the next sequence number gets the
    // end marker alone (`["", -1, ""]` after the REQ strips the delimiter).
    let end = rt.block_on(async {
        let mut req = ReqSocket::new();
        req.connect(&replay_ep).await.unwrap();
        req.send(ZmqMessage::from(c.next_seq.to_be_bytes().to_vec()))
            .await
            .unwrap();
        tokio::time::timeout(EVENT_TIMEOUT, req.recv())
            .await
            .expect("a replay answer in time")
            .unwrap()
            .into_vec()
    });
    assert_eq!(end.len(), 3, "[topic, seq, payload]");
    assert_eq!(i64::from_be_bytes(end[1][..].try_into().unwrap()), -1);
    assert!(end[0].is_empty() && end[2].is_empty());
    node.assert_serving(4242);
}

#[test]
fn a_restarted_node_announces_a_new_epoch_and_consumers_rebuild_its_state() {
    let g = tiny();
    let block = g.block_layout().payload_len + 64;
    // One block of RAM: every put demotes the previous block to disk, which survives a kill.
    let mut node = common::kvfabric().node(with_events(
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
    let mut c = Held::default();
    for (_, seq, payload) in
        rt.block_on(replay(&zmq_endpoint(&node, "ZeroMQ replay bound"), None, 0))
    {
        c.apply(seq, &events(&payload).1);
    }
    assert_eq!(c.hashes, ids.iter().map(|i| fallback_hash(i)).collect());
    let epoch = open(&node.url, None, "?since=0", &[]).unwrap().next().data["epoch"]
        .as_u64()
        .unwrap();

    node.kill();
    node.restart();

    // SSE: the new epoch is announced in seq 0, and an old Last-Event-ID resumes from it.
    let last = format!("{epoch}:3");
    let mut s = open(&node.url, None, "", &[("last-event-id", &last)]).unwrap();
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
    let batches = rt.block_on(replay(&zmq_endpoint(&node, "ZeroMQ replay bound"), None, 0));
    let (_, seq, payload) = &batches[0];
    assert_eq!(*seq, 0);
    let first = events(payload).1;
    assert_eq!(first[0].kind, "AllBlocksCleared");
    assert!(first[1..]
        .iter()
        .all(|e| e.kind == "BlockStored" && e.medium.as_deref() == Some("STORAGE")));
    c.next_seq = 0;
    for (_, seq, payload) in &batches {
        c.apply(*seq, &events(payload).1);
    }
    assert_eq!(
        c.hashes,
        ids[..2].iter().map(|i| fallback_hash(i)).collect()
    );
    assert_eq!(
        blocks(&recovered)
            .iter()
            .map(|i| fallback_hash(i))
            .collect::<BTreeSet<_>>(),
        c.hashes
    );
    // A recovered block keeps its token count.
    assert_eq!(recovered.data["block_tokens"], g.block_tokens());
    for id in &ids[..2] {
        assert_eq!(node.get(None, &format!("/v1/blocks/{id}"), &[]).status, 200);
    }
}

/// Runs `kvfabric node` on `events` (a minimal config otherwise) until it exits.
fn run_with_events(events: &str) -> (Option<i32>, String) {
    common::kvfabric().node_exit(&format!(
        "[node]\nid = 1\nhttp_listen = \"127.0.0.1:0\"\ndata_dir = \"data\"\n\n\
         [tiers]\nhost_bytes = \"16 MiB\"\n\n[events]\n{events}\n"
    ))
}

#[test]
fn a_bad_events_config_or_a_taken_port_stops_the_node_with_a_reason() {
    let (code, err) = run_with_events("zmq_pub = \"tcp://*:5557\"");
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("events.zmq_pub") && err.contains("tcp://IP:PORT"),
        "{err}"
    );
    let (code, err) = run_with_events("ring_batches = 0");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("events.ring_batches"), "{err}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (code, err) = run_with_events(&format!("zmq_pub = \"tcp://127.0.0.1:{port}\""));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("binding events.zmq_pub"), "{err}");
}
