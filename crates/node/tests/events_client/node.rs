//! Helpers shared by the event tests: a node config with `[events]`, puts, and the endpoint
//! a node logged for its ZeroMQ sockets.
#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use crate::common::{payload, tiny, Options, TestNode};
use crate::events_client::EVENT_TIMEOUT;

/// Node options with an `[events]` section, given as its TOML lines.
pub fn with_events(base: Options, events: &str) -> Options {
    Options {
        events: Some(toml::from_str(events).expect("an [events] section")),
        ..base
    }
}

pub fn put(node: &TestNode, token: Option<&str>, seed: u64) -> String {
    let g = tiny();
    node.put(token, &g, &payload(&g, seed), &[]).block()
}

/// The endpoint a node logged for one of its ZeroMQ sockets (the latest start's).
pub fn zmq_endpoint(node: &TestNode, what: &str) -> String {
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
