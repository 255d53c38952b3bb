//! `POST /v1/route` on a real 3-node cluster: blocks put with prefix and position-independent
//! chunk keys on different nodes; the prefix holder ranks first in prefix mode, the node
//! holding a document chunk behind another preamble counts it as an independent hit in any
//! mode, hits are counted by the tier the directory records, each node prices misses with its
//! own `[route]` (fetch when recomputing is slow, recompute when it is fast), another tenant
//! sees no hit, and a remote get's measured bandwidth is shared with every member.

mod cluster_harness;
mod common;

use std::io::Write;

use cluster_harness::{init_tracing, Cluster};
use common::{builtin, payload};
use kvfabric_store::{chunk_keys, ChunkMode, ModelGeometry, NamespaceKey};
use serde_json::{json, Value};

const MODEL: &str = "deepseek-v2-lite";
const TOKEN_A: &str = "route-test-token-a-0001";
const TOKEN_B: &str = "route-test-token-b-0002";

/// The prefix and independent keys of `preamble` (one chunk) then document `doc` (two
/// chunks), in tenant `a`'s namespace.
fn keys(g: &ModelGeometry, preamble: u32, doc: u32) -> (Vec<String>, Vec<String>) {
    let ns = NamespaceKey::derive("a");
    let n = g.block_tokens();
    let mut tokens: Vec<u32> = (0..n).map(|t| preamble * 1000 + t).collect();
    tokens.extend((0..2 * n).map(|t| 500_000 * doc + t));
    let hex = |mode| {
        chunk_keys(&ns, g, mode, &tokens)
            .iter()
            .map(|k| k.to_hex())
            .collect::<Vec<_>>()
    };
    (hex(ChunkMode::Prefix), hex(ChunkMode::Independent))
}

/// `POST /v1/route` on node `id` with `token`.
fn route(cluster: &Cluster, id: u64, token: &str, body: &Value) -> (u16, Value) {
    let r = ureq::post(format!("{}/v1/route", cluster.api(id)))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .config()
        .http_status_as_error(false)
        .build()
        .send(body.to_string().as_bytes())
        .expect("route answered");
    let status = r.status().as_u16();
    let v: Value = serde_json::from_slice(&r.into_body().read_to_vec().unwrap()).unwrap();
    (status, v)
}

/// `PUT /v1/blocks` on node `id` as tenant `a`.
fn put(cluster: &Cluster, id: u64, g: &ModelGeometry, seed: u64, extra: &[(&str, &str)]) {
    let mut headers = vec![("authorization", format!("Bearer {TOKEN_A}"))];
    headers.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = cluster.put_block(id, g, &payload(g, seed), &headers);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// The entry of node `name` in a route answer, if the answer lists it.
fn find<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["nodes"].as_array()?.iter().find(|n| n["node"] == name)
}

/// The entry of node `name` in a route answer; panics when it is missing.
fn entry<'a>(v: &'a Value, name: &str) -> &'a Value {
    find(v, name).unwrap_or_else(|| panic!("{name} missing from {v}"))
}

/// Whether the answer lists node `name` with `field` equal to `want`: a replica
/// that has not yet applied a holder's claims leaves that holder out.
fn has(v: &Value, name: &str, field: &str, want: u64) -> bool {
    find(v, name).is_some_and(|n| n[field] == want)
}

fn counts(n: &Value, fields: &[&str]) -> Vec<u64> {
    fields.iter().map(|f| n[*f].as_u64().unwrap()).collect()
}

#[test]
fn routes_rank_holders_count_tiers_price_misses_and_keep_tenants_apart() {
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: three nodes, one copy per put, a host tier of one block");
    let mut cluster = cluster_harness::kvfabric()
        .cluster_with(3, &["--replication", "1", "--host-bytes", "3 MiB"]);
    cluster.agreed_leader(&[1, 2, 3]);
    let (p1, i1) = keys(&g, 1, 1);
    let (p2, i2) = keys(&g, 2, 1);
    assert_eq!(
        i1[2], i2[2],
        "the document chunk's independent key ignores the preamble"
    );

    tracing::info!("phase 2: tenants and per-node [route] figures; every node restarted");
    let tenancy = format!(
        "\n[[namespaces]]\nname = \"a\"\n[[namespaces]]\nname = \"b\"\n\
         [[tenants]]\ntoken = \"{TOKEN_A}\"\nnamespace = \"a\"\n\
         [[tenants]]\ntoken = \"{TOKEN_B}\"\nnamespace = \"b\"\n"
    );
    // n1: recomputing is very slow (fetch every miss); n3: very fast (recompute every miss).
    let prefill = [(1, "0.001"), (2, "8000"), (3, "1000000000000")];
    for (id, tps) in prefill {
        cluster.kill(id);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(cluster.config(id))
            .unwrap();
        write!(f, "{tenancy}\n[route]\nprefill_tokens_per_s = {tps}\n").unwrap();
    }
    for id in 1..=3 {
        cluster.restart(id);
    }
    for id in 1..=3 {
        cluster.wait_for("the node ready again", || cluster.ready(id).then_some(()));
    }

    tracing::info!("phase 3: chunk 0 on n1's disk tier: pushed there, then recovered from it");
    put(&cluster, 1, &g, 1, &[]);
    put(&cluster, 1, &g, 99, &[]);
    cluster.kill(1);
    cluster.restart(1);
    cluster.wait_for("n1 ready again", || cluster.ready(1).then_some(()));
    // The same bytes again: shared with the recovered copy, claimed where it sits.
    put(&cluster, 1, &g, 1, &[("kvfabric-chunk-key", &p1[0])]);

    tracing::info!("phase 4: chunk 1 on n1 (host); the document chunk behind preamble 2 on n2");
    put(&cluster, 1, &g, 2, &[("kvfabric-chunk-key", &p1[1])]);
    put(
        &cluster,
        2,
        &g,
        3,
        &[
            ("kvfabric-chunk-key", &p2[2]),
            ("kvfabric-chunk-key-independent", &i2[2]),
        ],
    );
    tracing::info!("phase 5: prefix mode on n1: n1 first, with its leading run by tier");
    let prefix = json!({ "keys": p1, "chunks": i1, "mode": "prefix" });
    let v = cluster.wait_for("n1's replica to know both of its chunks", || {
        let (status, v) = route(&cluster, 1, TOKEN_A, &prefix);
        assert_eq!(status, 200, "{v}");
        has(&v, "n1", "prefix_hits", 2).then_some(v)
    });
    assert_eq!(v["model"], MODEL, "inferred from the blocks n1 holds: {v}");
    assert_eq!(v["nodes"][0]["node"], "n1", "{v}");
    let n1 = entry(&v, "n1");
    assert_eq!(
        n1["hits_by_tier"],
        json!({ "gpu": 0, "host": 1, "disk": 1 }),
        "{v}"
    );
    assert_eq!(n1["bytes"], 2 * 1_990_656);
    assert_eq!(
        counts(n1, &["independent_hits", "fetch", "recompute"]),
        [0, 0, 1]
    );
    let n2 = entry(&v, "n2");
    assert_eq!(
        counts(n2, &["hits", "fetch", "fetch_bytes", "recompute"]),
        [0, 2, 2 * 1_990_656, 1],
        "prefix mode ignores n2's independent key: {v}"
    );
    assert_eq!(v["bandwidth_source"], "configured", "nothing measured yet");

    tracing::info!("phase 6: any mode on n1: n2's document chunk is an independent hit");
    let any = json!({ "keys": p1, "chunks": i1 });
    let v = cluster.wait_for("n1's replica to know n2's chunk", || {
        let (_, v) = route(&cluster, 1, TOKEN_A, &any);
        has(&v, "n2", "independent_hits", 1).then_some(v)
    });
    let n1 = entry(&v, "n1");
    assert_eq!(
        counts(
            n1,
            &["prefix_hits", "independent_hits", "fetch", "recompute"]
        ),
        [2, 0, 1, 0]
    );
    let n2 = entry(&v, "n2");
    assert_eq!(
        counts(n2, &["prefix_hits", "independent_hits", "hits", "fetch"]),
        [0, 1, 1, 2]
    );
    assert_eq!(n2["hits_by_tier"]["host"], 1);
    let n3 = entry(&v, "n3");
    assert_eq!(
        counts(n3, &["hits", "fetch", "recompute"]),
        [0, 3, 0],
        "slow prefill on n1: {v}"
    );
    let order: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["n1", "n2", "n3"], "{v}");

    tracing::info!("phase 7: the same request on n3, whose prefill is fast: misses recomputed");
    let named = json!({ "keys": p1, "chunks": i1, "model": MODEL });
    let v = cluster.wait_for("n3's replica to know every chunk", || {
        let (status, v) = route(&cluster, 3, TOKEN_A, &named);
        assert_eq!(status, 200, "{v}");
        (has(&v, "n1", "hits", 2) && has(&v, "n2", "hits", 1)).then_some(v)
    });
    let n3 = entry(&v, "n3");
    assert_eq!(
        counts(n3, &["hits", "fetch", "recompute", "recompute_tokens"]),
        [0, 0, 3, 3 * 64],
        "{v}"
    );
    assert_eq!(counts(entry(&v, "n1"), &["fetch", "recompute"]), [0, 1]);

    tracing::info!("phase 8: tenant b sees no hit, exactly as for keys nobody put");
    let (p9, i9) = keys(&g, 9, 9);
    let absent = json!({ "keys": p9, "chunks": i9, "model": MODEL });
    let (status_b, as_b) = route(&cluster, 1, TOKEN_B, &named);
    let (status_absent, as_absent) = route(&cluster, 1, TOKEN_A, &absent);
    assert_eq!((status_b, status_absent), (200, 200));
    assert_eq!(
        as_b, as_absent,
        "another tenant's blocks are indistinguishable from none"
    );
    for n in as_b["nodes"].as_array().unwrap() {
        assert_eq!(counts(n, &["hits", "bytes", "fetch"]), [0, 0, 0], "{as_b}");
    }
    let (status, v) = route(&cluster, 1, TOKEN_B, &json!({ "keys": p1 }));
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("model_required")),
        "{v}"
    );
    let (status, v) = route(&cluster, 1, TOKEN_A, &json!({ "keys": ["00"] }));
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("invalid_chunk_key")),
        "{v}"
    );

    tracing::info!("phase 9: a get on n3 fetches from n1; every member learns the link n1 → n3");
    let block = {
        let r = ureq::post(format!("{}/v1/lookup", cluster.api(1)))
            .header("authorization", format!("Bearer {TOKEN_A}"))
            .header("content-type", "application/json")
            .send(json!({ "keys": [p1[1]] }).to_string().as_bytes())
            .unwrap()
            .into_body()
            .read_to_vec()
            .unwrap();
        let v: Value = serde_json::from_slice(&r).unwrap();
        v["results"][0]["block"].as_str().unwrap().to_owned()
    };
    let got = ureq::get(format!("{}/v1/blocks/{block}", cluster.api(3)))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .call()
        .unwrap();
    assert_eq!(got.headers().get("kvfabric-source").unwrap(), "n1");
    for id in 1..=3 {
        let link = cluster.wait_for("the measured link in /v1/cluster", || {
            let r = cluster.operator_get(id, "/v1/cluster")?.json();
            r["bandwidth"]
                .as_array()?
                .iter()
                .find(|l| l["from"] == "n1" && l["to"] == "n3")
                .cloned()
        });
        assert!(link["samples"].as_u64().unwrap() >= 1, "{link}");
        assert!(link["gbps"].as_f64().unwrap() > 0.0, "{link}");
        // A tenant sees no link: other tenants' transfers move them.
        let tenant = cluster
            .call(
                id,
                "GET",
                "/v1/cluster",
                &[("authorization", &format!("Bearer {TOKEN_A}"))],
                None,
            )
            .unwrap()
            .json();
        assert_eq!(tenant["bandwidth"], json!([]), "{tenant}");
        assert!(
            tenant["members"][0]["tiers"][0].get("used").is_none(),
            "{tenant}"
        );
    }
    // Nor is a tenant's route priced at them.
    let (_, v) = route(&cluster, 3, TOKEN_A, &json!({ "keys": p1, "model": MODEL }));
    assert_eq!(v["bandwidth_source"], "configured", "{v}");
    let metrics = cluster.operator_get(3, "/metrics").unwrap();
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines().any(|l| l.starts_with("kvfabric_link_samples{") && l.contains("from=\"n1\",to=\"n3\"")),
        "{text}"
    );
    assert!(
        text.contains("kvfabric_route_requests_total{node=\"n3\"}"),
        "{text}"
    );
}
