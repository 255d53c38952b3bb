//! A node with `[transport] kind = "ucx"` (a build with `--features ucx`, UCX over TCP on
//! loopback): blocks are pushed and fetched over UCX, Raft and control ride QUIC at the
//! members' `raft` addresses. Without the feature, the same config is refused at start with
//! the reason.

mod cluster_harness;
mod common;

use cluster_harness::{init_tracing, kvfabric};
#[cfg(feature = "ucx")]
use common::{builtin, payload};

#[cfg(feature = "ucx")]
#[test]
fn a_ucx_cluster_replicates_by_push_and_serves_remote_gets() {
    init_tracing();
    std::env::set_var("UCX_TLS", "tcp");
    let cluster = kvfabric().cluster_with(3, &["--transport", "ucx"]);
    let g = builtin("minicpm3-4b");
    let put = cluster.put_block(1, &g, &payload(&g, 1), &[]);
    assert_eq!(put.status, 201, "{}", put.text());
    assert_eq!(put.json()["replicas"], 2);
    let id = put.json()["block"].as_str().unwrap().to_owned();
    let holders: Vec<u64> = (1..=3).filter(|n| cluster.holds(*n, &id)).collect();
    assert_eq!(holders.len(), 2, "two copies: {holders:?}");
    let other = (1..=3).find(|n| !holders.contains(n)).unwrap();
    let got = cluster
        .get(other, &format!("/v1/blocks/{id}"))
        .expect("answered");
    assert_eq!(got.status, 200);
    assert_eq!(got.body, payload(&g, 1));
    let pushes = cluster
        .get(1, "/metrics")
        .expect("metrics")
        .text()
        .lines()
        .find(|l| l.starts_with("kvfabric_transport{") && l.contains("stat=\"pushes_ok\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .unwrap_or(0.0);
    assert!(pushes >= 1.0, "pushes over UCX counted");
}

#[cfg(not(feature = "ucx"))]
#[test]
fn without_the_feature_a_ucx_config_is_refused_with_the_reason() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let out = kvfabric()
        .command()
        .args([
            "cluster",
            "up",
            "--nodes",
            "1",
            "--transport",
            "ucx",
            "--timeout-s",
            "60",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(dir.path().join("node1.log")).unwrap_or_default();
    assert!(!out.status.success(), "{text}");
    assert!(
        log.contains("--features ucx") || text.contains("--features ucx"),
        "{text}\n{log}"
    );
    let _ = kvfabric()
        .command()
        .args(["cluster", "down", "--dir"])
        .arg(dir.path())
        .output();
}
