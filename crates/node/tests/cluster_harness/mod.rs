//! The shared cluster harness (`kvfabric_test_support::harness::cluster`) with this crate's
//! binary.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub use kvfabric_test_support::harness::cluster::*;
pub use kvfabric_test_support::harness::{init_tracing, Kvfabric, Reply};

/// The `kvfabric` binary of this crate.
pub fn kvfabric() -> Kvfabric {
    Kvfabric::at(env!("CARGO_BIN_EXE_kvfabric"))
}
