//! `kvfabric router` over real processes on loopback: on a 3-node cluster (one copy per
//! block) a request lands on the backend whose node holds its blocks, and a load override on
//! that backend moves it to another one, which fetches the blocks instead of recomputing them;
//! a prompt whose chunks sit behind a new first chunk is a prefix-only miss and a kvfabric hit;
//! a request in flight on one backend sends the next to an idle one (scores tied);
//! a dead backend is skipped (and counted), no live backend is a 503 JSON error, bad input is
//! a 400 JSON error counted in the router's metrics.

mod cluster_harness;
mod common;
mod router_harness;

use common::{Options, TestNode};
use kvfabric_store::ChunkMode;
use router_harness::{chunks, dead_url, keys, Server};
use serde_json::json;

const BT: usize = 64;

#[test]
fn router_forwards_by_score_and_moves_away_from_a_busy_backend() {
    cluster_harness::init_tracing();
    let model = "deepseek-v2-lite";
    let g = common::builtin(model);
    let cluster = cluster_harness::kvfabric().cluster_with(3, &["--replication", "1"]);
    let engines: Vec<Server> = (1..=3)
        .map(|id| {
            Server::start(&[
                "engine-sim",
                "--node",
                cluster.api(id),
                "--model",
                model,
                "--prefill-tokens-per-s",
                "1000000",
            ])
        })
        .collect();
    let mut args = vec![
        "router".to_owned(),
        "--node".into(),
        cluster.api(1).to_owned(),
        "--model".into(),
        model.into(),
        "--policy".into(),
        "kvfabric".into(),
    ];
    for (i, e) in engines.iter().enumerate() {
        args.push("--backend".into());
        args.push(format!("n{}={}", i + 1, e.url));
    }
    let router = Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    args[6] = "prefix".into();
    let prefix_router = Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>());

    // The prompt's blocks are computed on n2 only (replication 1).
    let prompt = chunks(5, 3, BT);
    let direct = engines[1].generate(&prompt, None);
    assert_eq!(direct["recomputed_tokens"], 3 * BT as u64, "{direct}");
    // n1 (the router's scoring node) reads a local directory replica: wait until it knows.
    let prefix_keys = keys(&g, ChunkMode::Prefix, &prompt);
    cluster.wait_for("n1 to see the prompt's blocks", || {
        prefix_keys
            .iter()
            .all(|k| cluster.lookup(1, k).1 == vec!["n2".to_owned()])
            .then_some(())
    });

    let routed = router.generate(&prompt, None);
    assert_eq!(routed["routed_to"], "n2", "{routed}");
    assert_eq!(routed["recomputed_tokens"], 0, "{routed}");
    assert_eq!(routed["hits_local"], 3, "{routed}");
    assert_eq!(routed["score"]["node"], "n2", "{routed}");
    assert_eq!(routed["route"]["policy"], "kvfabric", "{routed}");
    assert_eq!(routed["route"]["candidates"][0]["node"], "n2", "{routed}");

    // n2's backend is busy: the request goes elsewhere and its node fetches the blocks.
    let set = router.put("/v1/backends/n2/load", &json!({ "extra": 1000 }));
    assert_eq!(set.status, 200);
    assert_eq!(set.json()["load_override"], 1000);
    let moved = router.generate(&prompt, None);
    assert_ne!(moved["routed_to"], "n2", "{moved}");
    assert_eq!(moved["recomputed_tokens"], 0, "{moved}");
    assert_eq!(moved["hits_remote"], 3, "{moved}");
    assert_eq!(moved["mismatches"], 0, "{moved}");
    assert_eq!(
        moved["bytes_fetched"],
        3 * g.block_layout().payload_len,
        "{moved}"
    );
    let last = moved["route"]["candidates"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["node"], "n2", "{moved}");
    assert_eq!(last["load"], 1000, "{moved}");

    let backends = router.get("/v1/backends").json();
    let n2 = &backends["backends"][1];
    assert_eq!(n2["node"], "n2");
    assert_eq!(n2["forwarded"], 1, "{backends}");
    assert_eq!(n2["load_override"], 1000, "{backends}");
    assert_eq!(
        router.metric("kvfabric_router_forwarded_total{backend=\"n2\"}"),
        1.0
    );
    assert_eq!(router.metric("kvfabric_router_route_failures_total"), 0.0);

    // The same three chunks behind a new first chunk: a prefix-only stack recomputes them all;
    // kvfabric scoring sends the request where they are and recomputes only the new chunk.
    assert_eq!(
        router
            .put("/v1/backends/n2/load", &json!({ "extra": 0 }))
            .status,
        200
    );
    let behind = |first: u32| {
        let mut t = chunks(first, 1, BT);
        t.extend(&prompt);
        t
    };
    let today = prefix_router.generate(&behind(21), None);
    assert_eq!(today["route"]["policy"], "prefix", "{today}");
    assert_eq!(today["mode"], "prefix", "{today}");
    assert_eq!(today["recomputed_tokens"], 4 * BT as u64, "{today}");
    let ours = router.generate(&behind(22), None);
    assert_eq!(ours["recomputed_tokens"], BT as u64, "{ours}");
    assert_eq!(ours["hits_local"], 3, "{ours}");
    assert_eq!(ours["score"]["independent_hits"], 3, "{ours}");
}

fn single_node_router(backends: &[(&str, &str)], node: &TestNode) -> Server {
    let mut args = vec![
        "router".to_owned(),
        "--node".into(),
        node.url.clone(),
        "--model".into(),
        "minicpm3-4b".into(),
    ];
    for (id, url) in backends {
        args.push("--backend".into());
        args.push(format!("{id}={url}"));
    }
    Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn router_fails_over_from_a_dead_backend_and_refuses_bad_input() {
    let node = common::kvfabric().node(Options {
        tenants: false,
        ..Options::default()
    });
    let engine = Server::start(&[
        "engine-sim",
        "--node",
        &node.url,
        "--model",
        "minicpm3-4b",
        "--prefill-tokens-per-s",
        "1000000",
    ]);
    let dead = dead_url();
    // Equal scores: the first request tries the first backend first, which is dead.
    let router = single_node_router(&[("n1", &dead), ("n2", &engine.url)], &node);
    let v = router.generate(&chunks(9, 2, BT), None);
    assert_eq!(v["routed_to"], "n2", "{v}");
    assert_eq!(v["route"]["failed"][0]["node"], "n1", "{v}");
    assert_eq!(v["recomputed_tokens"], 2 * BT as u64, "{v}");
    assert_eq!(
        router.metric("kvfabric_router_backend_failures_total{backend=\"n1\"}"),
        1.0
    );
    assert_eq!(
        router.metric("kvfabric_router_forwarded_total{backend=\"n2\"}"),
        1.0
    );

    // Bad input never reaches a backend.
    router
        .post_raw("/v1/generate", b"{")
        .assert_error(400, "invalid_json");
    router
        .post_raw("/v1/generate", br#"{"tokens": "abc"}"#)
        .assert_error(400, "invalid_tokens");
    router
        .put("/v1/backends/n9/load", &json!({ "extra": 1 }))
        .assert_error(404, "unknown_backend");
    router
        .put("/v1/backends/n2/load", &json!({ "extra": "x" }))
        .assert_error(400, "invalid_load");
    assert_eq!(router.metric("kvfabric_router_rejected_total"), 4.0);
    assert_eq!(engine.metric("kvfabric_engine_rejected_total"), 0.0);

    // No live backend: 503 JSON, counted.
    let none = single_node_router(&[("n1", &dead)], &node);
    none.post("/v1/generate", &json!({ "tokens": chunks(9, 1, BT) }))
        .assert_error(503, "no_backend");
    assert_eq!(none.metric("kvfabric_router_unavailable_total"), 1.0);
}

#[test]
fn requests_in_flight_move_the_next_request_to_an_idle_backend() {
    let node = common::kvfabric().node(Options {
        tenants: false,
        ..Options::default()
    });
    let engine = |rate: &str| {
        Server::start(&[
            "engine-sim",
            "--node",
            &node.url,
            "--model",
            "minicpm3-4b",
            "--prefill-tokens-per-s",
            rate,
        ])
    };
    // Backend n1 prefills 2 chunks in 16 s (the margin for the two requests below on a loaded
    // machine); n2 is fast. Both read the same node, so their scores tie and only load
    // separates them.
    let slow = engine("8");
    let fast = engine("1000000");
    let router = single_node_router(&[("n1", &slow.url), ("n2", &fast.url)], &node);
    let url = router.url.clone();
    let held = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let body = json!({ "tokens": chunks(30, 2, BT) });
        let mut r = agent
            .post(format!("{url}/v1/generate"))
            .send(serde_json::to_vec(&body).unwrap().as_slice())
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&r.body_mut().read_to_vec().unwrap()).unwrap();
        v
    });
    // Wait (bounded) until the router counts it in flight on n1.
    let start = std::time::Instant::now();
    loop {
        let b = router.get("/v1/backends").json();
        if b["backends"][0]["in_flight"] == 1 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "never in flight: {b}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Turn 1 would pick n2 anyway; turn 2 would pick n1 on a tie, but n1 has a request in
    // flight.
    for seed in [31, 32] {
        let v = router.generate(&chunks(seed, 1, BT), None);
        assert_eq!(v["routed_to"], "n2", "{v}");
        let n1 = v["route"]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["node"] == "n1")
            .unwrap()
            .clone();
        assert_eq!(n1["load"], 1, "{v}");
    }
    let first = held.join().unwrap();
    assert_eq!(first["routed_to"], "n1", "{first}");
    assert_eq!(first["recomputed_tokens"], 2 * BT as u64, "{first}");
    let b = router.get("/v1/backends").json();
    assert_eq!(b["backends"][0]["in_flight"], 0, "{b}");
    assert_eq!(b["backends"][0]["forwarded"], 1, "{b}");
    assert_eq!(b["backends"][1]["forwarded"], 2, "{b}");
}
