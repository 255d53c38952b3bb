//! KV events end to end on real node processes through `GET /v1/events` (Server-Sent
//! Events): stored and removed with node and tier, gap-free sequence numbers, tier moves,
//! replay from `since` and `Last-Event-ID` with its refusals, tenancy and the subscriber bound.

mod common;
mod events_client;

use common::{payload, tiny, Options, TestNode, TOKEN_A, TOKEN_B, TOKEN_DOCS};
use events_client::node::{put, with_events};
use events_client::{blocks, Sse};
use serde_json::Value as Json;

/// Opens `GET /v1/events{query}` on `node`.
fn open(
    node: &TestNode,
    token: Option<&str>,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, (u16, Json)> {
    events_client::open(&node.url, token, query, headers)
}

#[test]
fn the_stream_shows_stored_and_removed_with_node_and_tier_and_gap_free_seqs() {
    let node = common::kvfabric().node(Options {
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
    // The hash the ZeroMQ wire names it by: the low 64 bits of the id, read big-endian.
    assert_eq!(
        got[0].data["hashes"][0].as_u64(),
        Some(u64::from_str_radix(&id[48..], 16).unwrap())
    );
    assert_eq!(got[0].data["engine"], Json::Null);
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
    let node = common::kvfabric().node(Options {
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
    let node = common::kvfabric().node(with_events(
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
    let node = common::kvfabric().node(with_events(Options::default(), "max_sse_subscribers = 2"));
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

    // Both see the epoch; A sees its own and the shared namespace's blocks, never B's, and
    // its positions count only what it sees (B's put and delete are not among them).
    assert_eq!(a.next().event, "epoch");
    let seen: Vec<(String, Vec<String>, u64)> = a
        .take(3)
        .iter()
        .map(|m| (m.event.clone(), blocks(m), m.data["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("stored".to_owned(), vec![of_a], 1),
            ("stored".to_owned(), vec![of_docs.clone()], 2),
            ("stored".to_owned(), vec![last_of_a], 3),
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

#[test]
fn a_live_subscriber_without_since_sees_live_events_and_a_far_behind_one_a_real_gap() {
    let node = common::kvfabric().node(with_events(
        Options {
            tenants: false,
            ..Options::default()
        },
        "ring_batches = 4",
    ));
    // Batches 0 (the epoch) to 6: the ring keeps 3..=6.
    let ids: Vec<String> = (1..=6).map(|seed| put(&node, None, seed)).collect();

    // Live, without since: the next batches, from seq 7, and no replay_gap.
    let mut live = open(&node, None, "", &[]).unwrap();
    let next = put(&node, None, 7);
    let m = live.next();
    assert_eq!(
        (m.event.as_str(), m.data["seq"].as_u64()),
        ("stored", Some(7)),
        "{m:?}"
    );
    assert_eq!(blocks(&m), [next]);
    let after = put(&node, None, 8);
    let m = live.next();
    assert_eq!((m.data["seq"].as_u64(), blocks(&m)), (Some(8), vec![after]));

    // From the oldest still buffered: no gap, then live.
    let mut from_oldest = open(&node, None, "?since=5", &[]).unwrap();
    let got: Vec<u64> = from_oldest
        .take(4)
        .iter()
        .map(|m| m.data["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(got, [5, 6, 7, 8]);
    assert_eq!(
        blocks(&open(&node, None, "?since=6", &[]).unwrap().next()),
        [ids[5].clone()]
    );
    // Further behind than the ring: a real gap, naming the oldest.
    let (status, body) = open(&node, None, "?since=4", &[]).err().unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("replay_gap"))
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("oldest available is 5"),
        "{body}"
    );
    assert_eq!(
        node.metric("kvfabric_event_replay_gaps_total{node=\"n1\"}"),
        1.0
    );
}

#[test]
fn a_put_with_engine_metadata_is_published_under_the_engine_identity() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let n = g.block_tokens();
    let tokens: Vec<String> = (0..n).map(|t| (1000 + t).to_string()).collect();
    let tokens = tokens.join(",");
    let page = (n / 4).to_string();
    let engine = [
        ("kvfabric-engine", "vllm/0.33.0"),
        ("kvfabric-engine-block-hashes", "i:11,i:12,i:13,i:14"),
        ("kvfabric-engine-parent-hash", "i:10"),
        ("kvfabric-engine-page-tokens", page.as_str()),
        ("kvfabric-engine-token-ids", tokens.as_str()),
        ("kvfabric-engine-lora-name", "adapter"),
    ];
    let mut a = open(&node, Some(TOKEN_A), "?since=1", &[]).unwrap();
    let mut reader = open(&node, Some(TOKEN_B), "?since=1", &[]).unwrap();
    let id = node
        .put(Some(TOKEN_DOCS), &g, &payload(&g, 5), &engine)
        .block();
    // The writer of the shared namespace is not a subscriber here; both subscribers read it.
    for (s, owner) in [(&mut a, false), (&mut reader, false)] {
        let m = s.next();
        assert_eq!(blocks(&m), std::slice::from_ref(&id));
        assert_eq!(m.data["hashes"], serde_json::json!([11, 12, 13, 14]));
        assert_eq!(m.data["engine"]["parent_block_hash"], 10);
        assert_eq!(m.data["engine"]["page_tokens"], n / 4);
        assert_eq!(m.data["engine"]["kv_cache_spec_kind"], "mla_attention");
        assert_eq!(m.data["engine"].get("token_ids").is_some(), owner, "{m:?}");
    }
    // Its own namespace's subscriber sees the token ids.
    let mut own = open(&node, Some(TOKEN_A), "?since=1", &[]).unwrap();
    let mine = node
        .put(Some(TOKEN_A), &g, &payload(&g, 6), &engine)
        .block();
    let m = loop {
        let m = own.next();
        if blocks(&m) == [mine.clone()] {
            break m;
        }
    };
    assert_eq!(m.data["engine"]["token_ids"][0], 1000);
    // Bad metadata is a 400 naming the header, before the body is stored.
    let r = node.put(
        Some(TOKEN_A),
        &g,
        &payload(&g, 7),
        &[
            ("kvfabric-engine", "vllm"),
            ("kvfabric-engine-block-hashes", "i:1"),
            ("kvfabric-engine-page-tokens", "3"),
        ],
    );
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("kvfabric-engine-page-tokens"));
}
