//! kvfabric's tools: the operator and test commands that stand beside a node, as a library
//! the `kvfabric` binary calls (so the command line stays one).
//!
//! Owns: `kvfabric cluster up|down|add|remove` (a local cluster of separate node processes,
//! grown and shrunk while it runs, [`cluster`]), the multi-agent demo ([`demo`]), the reference router ([`router`]), the
//! stand-in engine ([`engine_sim`]), the blocking HTTP client of the one-shot commands
//! ([`client`]), what the router's and engine's HTTP servers share ([`json_api`],
//! [`metrics_text`]), and the exit codes every command uses ([`exit`]).
//!
//! Must never: depend on the node crate (tools talk to nodes over their HTTP API and start
//! them as processes); leave a process running that it started (every start has a bounded
//! stop, also on failure and on Ctrl-C).

pub mod client;
pub mod cluster;
pub mod demo;
pub mod engine_sim;
pub mod exit;
pub mod json_api;
pub mod metrics_text;
pub mod router;
