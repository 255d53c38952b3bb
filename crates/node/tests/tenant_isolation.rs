//! Two tenants on a real 3-node cluster (issue 18, item 5): nothing tenant `b` is answered
//! depends on tenant `a`'s data. Every route, on every node:
//!
//! - per target (`GET`, `HEAD`, `DELETE` and `?position=`/`?variant=` reads of a block;
//!   `POST /v1/lookup` (local and linearizable) and `POST /v1/route` of a chunk key; every arena
//!   route): `b` asks about what `a` holds and about something nobody holds, and the two answers
//!   have the same status, the same headers (but `date`) and the same body once the target
//!   itself is written the same in both;
//! - `PUT`: `b` putting the bytes `a` put is answered exactly like `b` putting bytes nobody put
//!   (`dedup: "new"`, the same replicas; only the id differs, as it must);
//! - the views (`GET /v1/cluster`, `/v1/models`, `/v1/namespaces`, `/metrics`, `/readyz`): `b`'s
//!   answers before `a` did anything and after `a` put, read (a remote fetch too), deleted and
//!   created an arena are equal (`/metrics` is the operator's: the same 403);
//! - events: `b`'s SSE streams (node scope and the cluster feed) carry no `stored` or `removed`
//!   of `a`'s, while `a`'s own streams carry them (the streams work), and every position `b` is
//!   shown (`id`, `seq`, `feed_seq`) counts only what `b` sees: `b`'s three puts, with `a`'s
//!   activity between them, are positions 1, 2, 3 of its node stream (after the epoch's
//!   announcement), consecutive in the feed and in each member's stream there, as they would
//!   be had `a` done nothing; a resume from one of those positions replays exactly what came
//!   after it; the ZeroMQ sockets are operator-only (docs/API.md "KV events"), so no tenant
//!   subscribes to them.
//!
//! Not compared: an SSE event's `ts` (the time it was published).

mod cluster_harness;
mod common;
mod events_client;

use cluster_harness::{bearer, tenanted, Cluster, TENANT_A, TENANT_B};
use events_client::{open, Msg, Sse};
use kvfabric_test_support::harness::Reply;
use kvfabric_test_support::presets::{builtin, payload};
use serde_json::json;

const MODEL: &str = "deepseek-v2-lite";
const HYBRID: &str = "deepseek-v4-flash";
const NODES: [u64; 3] = [1, 2, 3];

/// An answer as compared: status, headers but `date` (sorted), body.
type Seen = (u16, Vec<(String, String)>, String);

/// `b`'s request: its status, headers but `date`, and body with `target` written as `TARGET`.
fn seen(r: &Reply, target: &str) -> Seen {
    let mut headers: Vec<(String, String)> = r
        .headers
        .iter()
        .filter(|(k, _)| k.as_str() != "date")
        .map(|(k, v)| {
            let v = v.to_str().unwrap_or("?").replace(target, "TARGET");
            (k.as_str().to_owned(), v)
        })
        .collect();
    headers.sort();
    (r.status, headers, r.text().replace(target, "TARGET"))
}

fn call(c: &Cluster, n: u64, token: &str, method: &str, path: &str, body: Option<&[u8]>) -> Reply {
    let (k, v) = bearer(token);
    let json = ("content-type", "application/json");
    let headers: Vec<(&str, &str)> = match body {
        Some(_) => vec![(k, &v), json],
        None => vec![(k, &v)],
    };
    c.call(n, method, path, &headers, body)
        .unwrap_or_else(|| panic!("n{n} did not answer {method} {path}"))
}

/// `b`'s answers to `request(target)` for `a`'s target and an absent one are the same.
fn same_for_both(
    c: &Cluster,
    what: &str,
    theirs: &str,
    absent: &str,
    request: impl Fn(&str) -> (String, String, Option<Vec<u8>>),
) {
    for n in NODES {
        let ask = |t: &str| {
            let (method, path, body) = request(t);
            seen(&call(c, n, TENANT_B, &method, &path, body.as_deref()), t)
        };
        let (a, x) = (ask(theirs), ask(absent));
        assert_eq!(
            a, x,
            "n{n} {what}: a's target and an absent one answered differently"
        );
    }
}

/// `b`'s views of the cluster, as compared before and after `a`'s activity.
fn views(c: &Cluster) -> Vec<Seen> {
    let mut out = Vec::new();
    for n in NODES {
        for path in [
            "/v1/cluster",
            "/v1/models",
            "/v1/namespaces",
            "/metrics",
            "/readyz",
        ] {
            out.push(seen(&call(c, n, TENANT_B, "GET", path, None), "\u{0}"));
        }
    }
    out
}

/// `b`'s views once two reads in a row agree: one read on a loaded machine may miss a
/// member's tiers (it did not answer in time), and the reference must not be such a read.
fn settled_views(c: &Cluster) -> Vec<Seen> {
    let mut prev = views(c);
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let next = views(c);
        if next == prev {
            return next;
        }
        prev = next;
    }
    panic!("b's views never settled: last {prev:?}");
}

/// Messages of `s` up to and including the `stored` of `marker`.
fn until_stored(s: &mut Sse, marker: &str) -> Vec<Msg> {
    let mut out = Vec::new();
    loop {
        let m = s.next();
        let done = m.event == "stored" && m.data["blocks"].to_string().contains(marker);
        out.push(m);
        if done {
            return out;
        }
    }
}

fn blocks_of(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .filter(|m| m.event == "stored" || m.event == "removed")
        .flat_map(|m| m.data["blocks"].as_array().cloned().unwrap_or_default())
        .map(|b| b.as_str().unwrap_or_default().to_owned())
        .collect()
}

fn chunk_key(seed: u8) -> String {
    format!("{seed:02x}").repeat(32)
}

#[test]
fn no_answer_to_one_tenant_depends_on_the_other_tenants_data() {
    let c = tenanted(3, &["--events-set", "cluster_feed=true"]);
    let g = builtin(MODEL);
    let before = settled_views(&c);
    let sse = |n: u64, token: &str, scope: &str| {
        open(c.api(n), Some(token), &format!("?scope={scope}"), &[]).expect("stream")
    };
    let mut b_node = sse(1, TENANT_B, "node");
    let mut b_feed = sse(2, TENANT_B, "cluster");
    let mut a_node = sse(1, TENANT_A, "node");

    // a: puts with chunk keys on n1 (two copies each), a read on every node (a remote fetch
    // where it is not held), a delete, an arena with a token in it.
    let put = |n: u64, token: &str, seed: u64, key: Option<&str>| {
        let (k, v) = bearer(token);
        let mut extra = vec![(k, v.as_str())];
        if let Some(key) = key {
            extra.push(("kvfabric-chunk-key", key));
        }
        let r = c.put_block(n, &g, &payload(&g, seed), &extra);
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()
    };
    let a_ids: Vec<String> = (0..3u8)
        .map(|i| {
            put(1, TENANT_A, u64::from(i), Some(&chunk_key(0xa0 + i)))["block"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for n in NODES {
        for id in &a_ids {
            let r = call(&c, n, TENANT_A, "GET", &format!("/v1/blocks/{id}"), None);
            assert_eq!(r.status, 200, "a reads its block on n{n}");
        }
    }
    let r = call(
        &c,
        1,
        TENANT_A,
        "DELETE",
        &format!("/v1/blocks/{}", a_ids[2]),
        None,
    );
    assert_eq!(r.status, 204);
    let (k, v) = bearer(TENANT_A);
    let arena = c
        .call(
            1,
            "POST",
            "/v1/arenas",
            &[(k, &v), ("kvfabric-model", HYBRID)],
            None,
        )
        .unwrap();
    assert_eq!(arena.status, 201, "{}", arena.text());
    let arena = arena.json();
    let a_arena = arena["arena"].as_str().unwrap().to_owned();
    let token = vec![7u8; arena["token_bytes"].as_u64().unwrap() as usize];
    let path = format!("/v1/arenas/{a_arena}/tokens");
    assert_eq!(
        call(&c, 1, TENANT_A, "POST", &path, Some(&token)).status,
        200
    );

    // b: the same bytes as a's first block, and bytes nobody put: answered alike.
    let theirs = put(1, TENANT_B, 0, None);
    let fresh = put(1, TENANT_B, 77, None);
    assert_ne!(theirs["block"], json!(a_ids[0]), "b's id is b's own");
    for field in ["dedup", "bytes", "replicas"] {
        assert_eq!(theirs[field], fresh[field], "b's put of a's bytes: {field}");
    }
    assert_eq!(theirs["dedup"], "new");

    // Per-target routes, on every node, for a's targets and absent ones.
    let absent_id = "5a".repeat(32);
    for (i, id) in a_ids.iter().enumerate() {
        let held = if i < 2 { "held" } else { "deleted" };
        for (method, query) in [
            ("GET", ""),
            ("HEAD", ""),
            ("GET", "?position=7"),
            ("GET", "?variant=1"),
            ("DELETE", ""),
        ] {
            same_for_both(
                &c,
                &format!("{method} {held}{query}"),
                id,
                &absent_id,
                |t| (method.into(), format!("/v1/blocks/{t}{query}"), None),
            );
        }
    }
    let absent_key = chunk_key(0x5b);
    for i in 0..3u8 {
        let key = chunk_key(0xa0 + i);
        for q in ["", "?consistency=linearizable"] {
            same_for_both(&c, &format!("lookup{q}"), &key, &absent_key, |t| {
                let body = json!({ "keys": [t] }).to_string().into_bytes();
                ("POST".into(), format!("/v1/lookup{q}"), Some(body))
            });
        }
        for mode in ["prefix", "any"] {
            same_for_both(&c, &format!("route {mode}"), &key, &absent_key, |t| {
                let body = json!({ "keys": [t], "chunks": [t], "mode": mode, "model": MODEL });
                (
                    "POST".into(),
                    "/v1/route".into(),
                    Some(body.to_string().into_bytes()),
                )
            });
        }
    }
    let absent_arena = "6c".repeat(16);
    for (method, tail, body) in [
        ("GET", "", None),
        ("DELETE", "", None),
        ("POST", "/tokens", Some(token.clone())),
        ("POST", "/layers/0/rows", Some(vec![1u8; 8])),
        ("GET", "/layers/0/window", None),
        ("POST", "/layers/0/drain", None),
    ] {
        same_for_both(
            &c,
            &format!("arena {method}{tail}"),
            &a_arena,
            &absent_arena,
            |t| (method.into(), format!("/v1/arenas/{t}{tail}"), body.clone()),
        );
    }
    assert_eq!(
        call(
            &c,
            1,
            TENANT_A,
            "GET",
            &format!("/v1/arenas/{a_arena}"),
            None
        )
        .status,
        200,
        "b's DELETE of a's arena freed nothing"
    );
    for id in &a_ids[..2] {
        let r = call(&c, 1, TENANT_A, "GET", &format!("/v1/blocks/{id}"), None);
        assert_eq!(r.status, 200, "b's DELETE of a's block dropped nothing");
    }

    // The views did not move with a's activity (asked again while a member's tiers are
    // missing because it did not answer in time: a loaded machine, not a's data).
    let mut last = Vec::new();
    let equal = (0..20).any(|_| {
        last = views(&c);
        last == before || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            false
        }
    });
    assert!(
        equal,
        "b's views before and after a's activity:\n{before:?}\n{last:?}"
    );

    // Events: a marker put by b ends each of b's streams; none carried a block of a's.
    let marker = put(1, TENANT_B, 78, None)["block"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut streams = Vec::new();
    for (name, s) in [("node", &mut b_node), ("cluster feed", &mut b_feed)] {
        let msgs = until_stored(s, &marker);
        streams.push(msgs.clone());
        let seen = blocks_of(&msgs);
        for id in &a_ids {
            assert!(
                !seen.contains(id),
                "b's {name} stream carried a's block {id}"
            );
        }
        assert!(
            seen.contains(&marker),
            "b's {name} stream carried b's own put"
        );
    }
    // b's positions count b's batches only: on n1 its three puts are 1, 2, 3 (0 is the
    // epoch's announcement), whatever a published between them.
    let b_puts: Vec<String> = [&theirs["block"], &fresh["block"], &json!(marker)]
        .iter()
        .map(|b| b.as_str().unwrap().to_owned())
        .collect();
    let node_msgs = &streams[0];
    let positions: Vec<(u64, Option<String>)> = node_msgs
        .iter()
        .map(|m| (m.data["seq"].as_u64().unwrap(), m.id.clone()))
        .collect();
    let epoch = node_msgs[0].data["epoch"].as_u64().unwrap();
    let want: Vec<(u64, Option<String>)> =
        (1..=3).map(|p| (p, Some(format!("{epoch}:{p}")))).collect();
    assert_eq!(positions, want, "b's node stream: {node_msgs:?}");
    assert_eq!(blocks_of(node_msgs), b_puts);
    // In the feed, b's entries are consecutive, and so are each member's batches in it.
    let feed_msgs = &streams[1];
    let feed: Vec<u64> = feed_msgs
        .iter()
        .map(|m| m.data["feed_seq"].as_u64().unwrap())
        .collect();
    assert!(
        feed.windows(2).all(|w| w[1] == w[0] + 1),
        "b's feed positions: {feed:?}"
    );
    for n in NODES {
        let member: Vec<u64> = feed_msgs
            .iter()
            .filter(|m| m.data["node"] == json!(format!("n{n}")))
            .map(|m| m.data["seq"].as_u64().unwrap())
            .collect();
        assert!(
            member.windows(2).all(|w| w[1] == w[0] + 1),
            "n{n}'s batches in b's feed: {member:?}"
        );
    }
    // Resuming after b's first put replays b's second and third, nothing of a's.
    let first = node_msgs[0].id.clone().unwrap();
    let mut resumed =
        open(c.api(1), Some(TENANT_B), "", &[("last-event-id", &first)]).expect("resumed stream");
    let again = resumed.take(2);
    assert_eq!(blocks_of(&again), b_puts[1..]);
    assert_eq!(again[1].id.as_deref(), Some(format!("{epoch}:3").as_str()));

    // And a's stream, ended by a marker of a's after all of b's puts, carries a's and no b's.
    let a_marker = put(1, TENANT_A, 79, None)["block"]
        .as_str()
        .unwrap()
        .to_owned();
    let a_seen = blocks_of(&until_stored(&mut a_node, &a_marker));
    assert!(
        a_seen.contains(&a_ids[0]),
        "a's stream carries a's puts: {a_seen:?}"
    );
    for b_block in [&theirs["block"], &fresh["block"], &json!(marker)] {
        let b_block = b_block.as_str().unwrap().to_owned();
        assert!(
            !a_seen.contains(&b_block),
            "a's stream carried b's block {b_block}"
        );
    }
}
