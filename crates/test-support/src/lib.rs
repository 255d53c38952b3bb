//! kvfabric's shared test fixtures: what several crates' tests (and the tools that start
//! clusters) need the same way.
//!
//! Owns: the small model presets tests store and deterministic payloads for them
//! ([`presets`]); the node config file as a typed, serializable value ([`config`]: the one
//! writer of node configs, used by `kvfabric cluster up`, the tests and the chaos harness);
//! and the process harness of real-process tests ([`harness`]: a node or a `cluster up`
//! cluster of the real binary, its HTTP client, bounded waits, cleanup on drop).
//!
//! Must never: assert on timing (every wait is bounded and generous, nothing measures); leave
//! a process running that it started.

pub mod config;
pub mod harness;
pub mod presets;
