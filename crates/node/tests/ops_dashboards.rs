//! The shipped Grafana dashboard (`ops/grafana/kvfabric.json`) and Prometheus alert rules
//! (`ops/prometheus/alerts.yml`) name only series a running node exports: a 3-node cluster
//! does puts, local and cross-node gets, a miss, a refused request and a refused route, and
//! every `kvfabric_*` series and every `stat="…"` the files select must appear as a sample
//! in the nodes' `/metrics`.

mod cluster_harness;
mod common;

use std::collections::BTreeSet;
use std::path::Path;

use cluster_harness::init_tracing;
use common::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";

fn repo_file(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Every `expr` and templating `query` in the dashboard, rows' panels included.
fn dashboard_queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if s.contains("kvfabric_") => {
                        out.push(s.clone())
                    }
                    _ => dashboard_queries(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| dashboard_queries(x, out)),
        _ => {}
    }
}

/// The `expr:` of every rule (folded `>-` blocks included).
fn alert_exprs(yaml: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let rest = rest.trim();
        if rest == ">-" || rest == "|" || rest == ">" {
            let mut e = String::new();
            while let Some(next) = lines.peek() {
                let i = next.len() - next.trim_start().len();
                if next.trim().is_empty() || i <= indent {
                    break;
                }
                e.push_str(next.trim());
                e.push(' ');
                lines.next();
            }
            out.push(e);
        } else {
            out.push(rest.to_owned());
        }
    }
    out
}

/// Names `kvfabric_…` and the values of `stat="…"` selectors in `queries`.
fn names_and_stats(queries: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut names, mut stats) = (BTreeSet::new(), BTreeSet::new());
    for q in queries {
        let b = q.as_bytes();
        let mut i = 0;
        while let Some(at) = q[i..].find("kvfabric_") {
            let start = i + at;
            let mut end = start;
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
            names.insert(q[start..end].to_owned());
            i = end;
        }
        for part in q.split("stat=\"").skip(1) {
            stats.insert(part.split('"').next().unwrap_or("").to_owned());
        }
    }
    (names, stats)
}

/// Sample lines' series names and the `stat` label values seen in `text`.
fn exported(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut names, mut stats) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        names.insert(name);
        if let Some(s) = line.split("stat=\"").nth(1) {
            stats.insert(s.split('"').next().unwrap_or("").to_owned());
        }
    }
    (names, stats)
}

#[test]
fn every_series_the_dashboard_and_alerts_name_is_exported_by_a_node() {
    init_tracing();
    let dash: serde_json::Value =
        serde_json::from_str(&repo_file("ops/grafana/kvfabric.json")).expect("dashboard JSON");
    assert!(
        dash["panels"].as_array().is_some_and(|p| p.len() >= 20),
        "the dashboard has panels"
    );
    let mut queries = Vec::new();
    dashboard_queries(&dash, &mut queries);
    let alerts = repo_file("ops/prometheus/alerts.yml");
    let exprs = alert_exprs(&alerts);
    assert!(exprs.len() >= 10, "alert expressions found: {exprs:?}");
    assert_eq!(
        exprs.len(),
        alerts.matches("- alert:").count(),
        "one expr per rule"
    );
    queries.extend(exprs);
    let (names, stats) = names_and_stats(&queries);
    assert!(names.len() >= 30, "{names:?}");

    tracing::info!("phase 1: three nodes; puts on n1, gets on every node, a miss, refusals");
    let g = builtin(MODEL);
    let cluster = cluster_harness::kvfabric().cluster(3);
    cluster.agreed_leader(&[1, 2, 3]);
    let mut ids = Vec::new();
    for seed in 0..3 {
        let r = cluster.put_block(1, &g, &payload(&g, 500 + seed), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        ids.push(r.json()["block"].as_str().unwrap().to_owned());
        // The same bytes again: a shared (deduplicated) put.
        let r = cluster.put_block(1, &g, &payload(&g, 500 + seed), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
    }
    for id in &ids {
        for n in 1..=3 {
            // With 2 copies on 3 nodes, one of n2 and n3 fetches each block from a holder.
            let r = cluster.get(n, &format!("/v1/blocks/{id}")).expect("get");
            assert_eq!(r.status, 200, "n{n} {id}: {}", r.text());
        }
    }
    let absent = "00".repeat(32);
    assert_eq!(
        cluster
            .get(2, &format!("/v1/blocks/{absent}"))
            .unwrap()
            .status,
        404
    );
    assert_eq!(cluster.get(2, "/v1/blocks/zz").unwrap().status, 400);
    let r = cluster
        .post(3, "/v1/route", &serde_json::json!({"keys": ["nothex"]}))
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());

    tracing::info!("phase 2: every named series is a sample in some node's /metrics");
    let (mut have, mut have_stats) = (BTreeSet::new(), BTreeSet::new());
    for n in 1..=3 {
        let text = cluster.get(n, "/metrics").expect("metrics").text();
        let (a, b) = exported(&text);
        have.extend(a);
        have_stats.extend(b);
    }
    let missing: Vec<_> = names.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "named but not exported: {missing:?}\nexported: {have:?}"
    );
    let missing: Vec<_> = stats.difference(&have_stats).collect();
    assert!(
        missing.is_empty(),
        "stat values selected but not exported: {missing:?}\nexported: {have_stats:?}"
    );
}

#[test]
fn the_extractors_find_names_in_folded_rules_and_ignore_other_text() {
    let yaml = "groups:\n  - rules:\n      - alert: A\n        expr: >-\n          rate(kvfabric_x_total[5m])\n          > kvfabric_y{stat=\"s1\"}\n        for: 1m\n      - alert: B\n        expr: kvfabric_z > 0\n";
    let exprs = alert_exprs(yaml);
    assert_eq!(exprs.len(), 2, "{exprs:?}");
    let (names, stats) = names_and_stats(&exprs);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["kvfabric_x_total", "kvfabric_y", "kvfabric_z"]
    );
    assert_eq!(stats.into_iter().collect::<Vec<_>>(), ["s1"]);
    let (have, stats) = exported(
        "# TYPE kvfabric_q counter\nkvfabric_q_total{node=\"n1\"} 1\nkvfabric_r{node=\"n1\",stat=\"t\"} 2\n",
    );
    assert_eq!(
        have.into_iter().collect::<Vec<_>>(),
        ["kvfabric_q_total", "kvfabric_r"]
    );
    assert_eq!(stats.into_iter().collect::<Vec<_>>(), ["t"]);
}
