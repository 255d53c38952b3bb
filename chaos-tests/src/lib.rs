//! kvfabric's chaos and partition harness (issue 7): real `kvfabric` node processes under
//! faults, a concurrent workload whose every operation is recorded, and a checker over that
//! history.
//!
//! - [`layout`]: addresses, data directories and configs of a run's nodes.
//! - [`relay`]: the user-space UDP relay every node-to-node packet crosses (partitions, loss,
//!   delay).
//! - [`netns`]: nodes as separate hosts in network namespaces, partitions and loss by
//!   nftables (where namespaces are unavailable the run says so and stays on loopback).
//! - [`nodes`]: the node processes and the process / disk nemeses.
//! - [`nemesis`]: the fault schedule.
//! - [`client`], [`workload`], [`history`]: the clients and what they recorded.
//! - [`checker`]: the verdict; [`report`]: the table and the JSON report; [`run`]: one run;
//!   [`timeline`]: every node's Raft and transport counters through it, for post-mortems.

pub mod availability;
pub mod checker;
pub mod client;
pub mod history;
pub mod layout;
pub mod nemesis;
pub mod netns;
pub mod nodes;
pub mod relay;
pub mod report;
pub mod rng;
pub mod run;
pub mod timeline;
pub mod workload;
