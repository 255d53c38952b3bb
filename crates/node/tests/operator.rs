//! The operator's view with real node processes: who may use `/v1/operator/…` (the operator
//! token only; tenants get 403 `operator_only`; a node with tenants and no operator token
//! refuses everyone; an open node without one serves anyone), what the overview carries
//! (members with tiers and counters that move with puts, gets and fetches), the operator's
//! event stream (every tenant's events, where a tenant's own stream shows only its own), the
//! operator's claims (refused to tenants, bad records named, none on a standalone node; on a
//! cluster, committed and resolved by any member's linearizable lookup), every member's
//! directory digest (one digest at one applied entry; none on a standalone node), and the
//! dashboard's static page.

mod cluster_harness;
mod common;
mod events_client;

use common::{builtin, payload, tiny, Options, TOKEN_A, TOKEN_B};
use events_client::{blocks, open_at};

const OPERATOR: &str = "operator-token-for-tests-0001";

fn overview(node: &common::TestNode, token: Option<&str>) -> common::Reply {
    node.get(token, "/v1/operator/overview", &[])
}

#[test]
fn only_the_operator_token_opens_the_operator_routes() {
    tracing::info!("phase 1: tenants and no operator token: the routes are off");
    let node = common::kvfabric().node(Options {
        operator: None,
        ..Options::default()
    });
    overview(&node, None).assert_error(403, "operator_disabled");
    overview(&node, Some(TOKEN_A)).assert_error(403, "operator_disabled");
    drop(node);

    tracing::info!("phase 2: tenants and an operator token");
    let node = common::kvfabric().node(Options {
        operator: Some(OPERATOR.into()),
        ..Options::default()
    });
    overview(&node, None).assert_error(401, "missing_token");
    overview(&node, Some(TOKEN_A)).assert_error(403, "operator_only");
    overview(&node, Some("not-a-token-of-this-node")).assert_error(401, "invalid_token");
    let r = overview(&node, Some(OPERATOR));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["node"], "n1");
    assert!(v["now_ms"].as_u64().unwrap() > 0);
    assert_eq!(v["members"][0]["role"], "standalone");
    assert!(v["members"][0]["stats"]["hits"].is_array(), "{v}");
    let r = open_at(&node.url, "/v1/operator/events", Some(TOKEN_A), "", &[]);
    assert_eq!(
        r.err().map(|(s, j)| (s, j["error"]["code"].clone())),
        Some((403, "operator_only".into()))
    );
    // Claims: the operator's only; bad records named; a standalone node has no directory.
    let h1 = "11".repeat(32);
    let claim = format!(r#"{{"claims":[{{"block":"{h1}","key":"{h1}"}}]}}"#);
    let claims = |token, body: &str| node.post(token, "/v1/operator/claims", body.as_bytes());
    claims(Some(TOKEN_A), &claim).assert_error(403, "operator_only");
    claims(None, &claim).assert_error(401, "missing_token");
    claims(Some(OPERATOR), r#"{"claims":[{"block":"xyz"}]}"#).assert_error(400, "invalid_block_id");
    claims(Some(OPERATOR), r#"{"claims":[]}"#).assert_error(400, "invalid_json");
    claims(Some(OPERATOR), &claim).assert_error(503, "directory_unavailable");
    let digest = |token| node.get(token, "/v1/operator/directory", &[]);
    digest(Some(TOKEN_A)).assert_error(403, "operator_only");
    digest(None).assert_error(401, "missing_token");
    digest(Some(OPERATOR)).assert_error(503, "directory_unavailable");
    // The tenants' view of the cluster carries no counters.
    let c = node.get(Some(TOKEN_A), "/v1/cluster", &[]).json();
    assert!(c["members"][0].get("stats").is_none(), "{c}");
    drop(node);

    tracing::info!("phase 3: an open node without an operator token serves them to anyone");
    let node = common::kvfabric().node(Options {
        tenants: false,
        operator: None,
        ..Options::default()
    });
    assert_eq!(overview(&node, None).status, 200);
}

#[test]
fn the_overview_counts_and_the_operator_stream_shows_every_tenant() {
    let node = common::kvfabric().node(Options {
        operator: Some(OPERATOR.into()),
        ..Options::default()
    });
    // Live only (no `since`): the stream starts at the next batch, without a replay gap.
    let mut op = open_at(&node.url, "/v1/operator/events", Some(OPERATOR), "", &[])
        .expect("operator stream");
    let mut a = open_at(&node.url, "/v1/events", Some(TOKEN_A), "?since=0", &[]).expect("a");
    let g = tiny();
    let id_a = node.put(Some(TOKEN_A), &g, &payload(&g, 1), &[]).block();
    let id_b = node.put(Some(TOKEN_B), &g, &payload(&g, 2), &[]).block();
    let again = node.put(Some(TOKEN_A), &g, &payload(&g, 1), &[]).block();
    assert_eq!(again, id_a);
    assert_eq!(
        node.get(Some(TOKEN_A), &format!("/v1/blocks/{id_a}"), &[])
            .status,
        200
    );
    assert_eq!(
        node.get(
            Some(TOKEN_A),
            &format!("/v1/blocks/{}", "00".repeat(32)),
            &[]
        )
        .status,
        404
    );

    let stored = |s: &mut events_client::Sse, n: usize| -> Vec<String> {
        let mut out = Vec::new();
        while out.len() < n {
            let m = s.next();
            assert_ne!(m.event, "replay_gap", "{m:?}");
            if m.event == "stored" {
                out.extend(blocks(&m));
            }
        }
        out
    };
    let seen = stored(&mut op, 2);
    assert!(seen.contains(&id_a) && seen.contains(&id_b), "{seen:?}");
    let seen_a = stored(&mut a, 1);
    assert_eq!(seen_a, vec![id_a.clone()], "tenant a sees only its own");

    let v = overview(&node, Some(OPERATOR)).json();
    let s = &v["members"][0]["stats"];
    assert_eq!(s["puts_new"], 2, "{s}");
    assert_eq!(s["puts_shared"], 1, "{s}");
    assert!(
        s["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_u64().unwrap())
            .sum::<u64>()
            >= 1,
        "{s}"
    );
    assert_eq!(s["not_found"], 1, "{s}");
    assert_eq!(s["held_blocks"], 2, "{s}");
    assert_eq!(s["dedup_collisions"], 0, "{s}");
}

#[test]
fn the_dashboard_page_is_served_static_with_a_strict_policy() {
    let node = common::kvfabric().node(Options::default());
    for (path, kind) in [
        ("/dashboard", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/app.css", "text/css"),
    ] {
        let r = node.get(None, path, &[]);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type").unwrap().starts_with(kind),
            "{path}"
        );
        let csp = r.header("content-security-policy").unwrap();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
            "{csp}"
        );
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    let page = node.get(None, "/dashboard", &[]).text();
    assert!(
        page.contains("/dashboard/app.js") && page.contains("id=\"members\""),
        "{page}"
    );
    let js = node.get(None, "/dashboard/app.js", &[]).text();
    assert!(js.contains("/v1/operator/overview") && js.contains("/v1/operator/events"));
    assert!(
        !js.contains("innerHTML"),
        "the page never parses data as HTML"
    );
}

#[test]
fn the_overview_of_a_cluster_shows_every_member_with_counters_and_fetches() {
    cluster_harness::init_tracing();
    let g = builtin("deepseek-v2-lite");
    let cluster = cluster_harness::kvfabric().cluster(3);
    cluster.agreed_leader(&[1, 2, 3]);
    // A push hedged on a loaded machine may copy the block to every member (docs/API.md,
    // "Hedging"): then none would fetch it, so another block is put.
    let mut puts = 0;
    let id = (77..82u64)
        .find_map(|seed| {
            puts += 1;
            let r = cluster.put_block(1, &g, &payload(&g, seed), &[]);
            assert_eq!(r.status, 201, "{}", r.text());
            let id = r.json()["block"].as_str().unwrap().to_owned();
            let holders = cluster.settled_holders(&id);
            (2..=3).any(|n| !holders.contains(&n)).then_some(id)
        })
        .expect("a put left a member without a copy within 5 tries");
    for n in 2..=3 {
        assert_eq!(
            cluster.get(n, &format!("/v1/blocks/{id}")).unwrap().status,
            200
        );
    }
    // The other members' counters are asked of them; a member answers once it is live.
    let v = cluster.wait_for("every member's counters in n1's overview", || {
        let r = cluster.operator_get(1, "/v1/operator/overview")?;
        let v = r.json();
        let members = v["members"].as_array()?;
        (members.len() == 3 && members.iter().all(|m| m["stats"].is_object())).then_some(v)
    });
    let stats = |id: &str| {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {v}"))["stats"]
            .clone()
    };
    assert_eq!(stats("n1")["puts_new"], puts, "{v}");
    let fetched: u64 = ["n2", "n3"]
        .iter()
        .map(|n| stats(n)["fetches_ok"].as_u64().unwrap())
        .sum();
    assert!(fetched >= 1, "the member without a copy fetched it: {v}");
    let held: u64 = ["n1", "n2", "n3"]
        .iter()
        .map(|n| stats(n)["held_blocks"].as_u64().unwrap())
        .sum();
    assert!(
        held >= 3 && (puts > 1 || held == 3),
        "two copies plus the reader's (more after a retried put): {v}"
    );
    assert!(v["members"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["healthy"] == true));
    // Operator claims on n2 (no payload): committed, then any member's linearizable lookup
    // resolves their keys to their blocks, owned by n2.
    let (b1, b2, k1, k2) = (
        "a1".repeat(32),
        "a2".repeat(32),
        "b1".repeat(32),
        "b2".repeat(32),
    );
    let body = serde_json::json!({"claims": [{"block": b1, "key": k1}, {"block": b2, "key": k2}]});
    let r = cluster
        .operator_post(2, "/v1/operator/claims", &body)
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["claimed"], 2);
    for (n, (b, k)) in [(3, (&b1, &k1)), (1, (&b2, &k2))] {
        let r = cluster
            .post(
                n,
                "/v1/lookup?consistency=linearizable",
                &serde_json::json!({"keys": [k]}),
            )
            .unwrap();
        let v = r.json();
        assert_eq!(v["results"][0]["block"], b.as_str(), "n{n}: {v}");
        assert_eq!(
            v["results"][0]["owners"],
            serde_json::json!(["n2"]),
            "n{n}: {v}"
        );
    }
    let r = cluster.post(1, "/v1/operator/claims", &body).unwrap();
    assert_eq!(r.status, 401, "no operator token: {}", r.text());
    let tenant = cluster.get(1, "/v1/cluster").unwrap().json();
    assert!(tenant["members"][0].get("stats").is_none(), "{tenant}");

    // Every member's directory replica: at one applied entry, one digest (lease renewals keep
    // the log moving, so the three are asked until they report the same entry).
    let digests = cluster.wait_for("every member's replica at one applied entry", || {
        let d: Vec<serde_json::Value> = (1..=3)
            .map(|n| {
                cluster
                    .operator_get(n, "/v1/operator/directory")
                    .map(|r| r.json())
            })
            .collect::<Option<_>>()?;
        d.windows(2)
            .all(|w| w[0]["applied"] == w[1]["applied"])
            .then_some(d)
    });
    for (i, d) in digests.iter().enumerate() {
        assert_eq!(d["node"], format!("n{}", i + 1), "{d}");
        assert!(d["applied_index"].as_u64().unwrap() > 0, "{d}");
        assert_eq!(d["digest"].as_str().unwrap().len(), 64, "{d}");
        assert_eq!(d["digest"], digests[0]["digest"], "{digests:?}");
    }
}
