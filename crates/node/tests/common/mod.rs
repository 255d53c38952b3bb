//! The shared single-node harness (`kvfabric_test_support::harness::node`) with this crate's
//! binary, and the shared presets.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub use kvfabric_test_support::config::LimitsSection;
pub use kvfabric_test_support::harness::node::*;
pub use kvfabric_test_support::harness::{Kvfabric, Reply};
pub use kvfabric_test_support::presets::{builtin, payload, tiny};

/// The `kvfabric` binary of this crate.
pub fn kvfabric() -> Kvfabric {
    Kvfabric::at(env!("CARGO_BIN_EXE_kvfabric"))
}
