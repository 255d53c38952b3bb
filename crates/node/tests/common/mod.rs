//! The shared single-node harness (`kvfabric_test_support::harness::node`) with this crate's
//! binary, and the shared presets.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub use kvfabric_test_support::config::{GpuSection, LimitsSection};
pub use kvfabric_test_support::harness::node::*;
pub use kvfabric_test_support::harness::{Kvfabric, Reply};
pub use kvfabric_test_support::presets::{builtin, payload, tiny};

/// The `kvfabric` binary of this crate (or `KVFABRIC_BIN`'s, for test executables carried to
/// another machine: `tools/device-test`).
pub fn kvfabric() -> Kvfabric {
    match std::env::var_os("KVFABRIC_BIN") {
        Some(bin) => Kvfabric::at(bin),
        None => Kvfabric::at(env!("CARGO_BIN_EXE_kvfabric")),
    }
}

/// Polls `f` until it holds (bounded at a minute; nothing asserts on timing).
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
