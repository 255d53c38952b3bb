//! Bounds under misbehaving clients: requests in flight, slow bodies, clients that vanish
//! mid-body. Each refusal is a JSON error, the reservation is given back, and the node keeps
//! serving.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::{eventually, payload, tiny, Options, TestNode, TOKEN_A};

/// Opens a put of the tiny model and sends its headers and half its body, then stops.
fn half_put(node: &TestNode) -> TcpStream {
    let g = tiny();
    let p = payload(&g, 70);
    let mut s = TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(common::CALL_TIMEOUT)).unwrap();
    write!(
        s,
        "PUT /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN_A}\r\n\
         kvfabric-model: tiny-mla\r\nkvfabric-tokens: 64\r\ncontent-length: {}\r\n\r\n",
        p.len()
    )
    .unwrap();
    s.write_all(&p[..p.len() / 2]).unwrap();
    s.flush().unwrap();
    s
}

fn host_used(node: &TestNode) -> f64 {
    node.metric("kvfabric_tier_used_bytes{node=\"n1\",tier=\"host\"}")
}

#[test]
fn requests_beyond_the_inflight_limit_are_503() {
    // The body timeout is far beyond the test's polling, so the half put holds the one slot
    // until the client lets go of it, however slowly this machine runs.
    let node = common::kvfabric().node(Options {
        limits: common::LimitsSection {
            max_inflight_requests: Some(1),
            body_read_timeout_ms: Some(600_000),
            ..Default::default()
        },
        ..Options::default()
    });
    let slow = half_put(&node);
    // Only the probes ask until the put holds the slot: a request sent now could reach the
    // node before the put's headers do, take the slot, and have the put refused instead.
    eventually("the half put holds the one slot", || {
        node.metric("kvfabric_inflight_requests{node=\"n1\"}") == 1.0 && host_used(&node) > 0.0
    });
    let r = node.get(Some(TOKEN_A), "/v1/models", &[]);
    r.assert_error(503, "overloaded");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        node.get(None, "/healthz", &[]).status,
        200,
        "probes are exempt"
    );
    assert!(host_used(&node) > 0.0, "the half put holds a reservation");
    drop(slow);
    eventually("the slot and the reservation are given back", || {
        host_used(&node) == 0.0 && node.get(Some(TOKEN_A), "/v1/models", &[]).status == 200
    });
    node.assert_serving(71);
}

#[test]
fn a_body_slower_than_the_timeout_is_408_and_gives_its_reservation_back() {
    let node = common::kvfabric().node(Options {
        limits: common::LimitsSection {
            body_read_timeout_ms: Some(1000),
            ..Default::default()
        },
        ..Options::default()
    });
    let mut slow = half_put(&node);
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut slow, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"body_timeout\""), "{answer}");
    eventually("the reservation is given back", || host_used(&node) == 0.0);
    node.assert_serving(75);
}

#[test]
fn a_client_that_vanishes_mid_body_leaks_nothing() {
    let node = common::kvfabric().node(Options::default());
    for _ in 0..3 {
        let s = half_put(&node);
        eventually("the put is under way", || host_used(&node) > 0.0);
        drop(s);
        eventually("the reservation is given back", || host_used(&node) == 0.0);
    }
    // The request's slot is given back just after its reservation.
    eventually("in-flight requests are accounted however they end", || {
        node.metric("kvfabric_inflight_requests{node=\"n1\"}") == 0.0
    });
    node.assert_serving(72);
}

#[test]
fn sigterm_stops_the_node_cleanly() {
    let mut node = common::kvfabric().node(Options::default());
    node.assert_serving(73);
    let status = node.terminate();
    assert!(status.success(), "{status:?}");
    assert!(node.log().contains("shutting down"));
}

#[test]
fn a_second_node_on_the_same_data_dir_exits_with_the_reason() {
    let node = common::kvfabric().node(Options::default());
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kvfabric"))
        .args(["node", "--config", node.config_path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("kvfabric: error: opening the store"),
        "{err}"
    );
    node.assert_serving(74);
}
