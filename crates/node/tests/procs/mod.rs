//! Live processes seen through `/proc` (`kvfabric_test_support::harness::procs`).
#![allow(dead_code, unreachable_pub, unused_imports)]

pub use kvfabric_test_support::harness::procs::*;
