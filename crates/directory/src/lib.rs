//! kvfabric's directory: the Raft-replicated map from content hashes to the nodes that hold
//! them.
//!
//! Owns, per shard: the state machine (`BlockId → owners {(node, tier, epoch)}`,
//! `ChunkKey → BlockId`, node epochs and liveness leases; [`shard`]), exactly-once
//! application of retried writes ([`sessions`], with ids issued so that none in flight is
//! forgotten: `request_ids`), its persistence (the Raft log and vote in a write-ahead log of
//! its own, snapshots in redb; [`storage`]), the batching of ownership records ([`batcher`])
//! and, on the leader, the merging of several nodes' batches into one entry ([`merge`]),
//! early replication of the leader's entries beside its own write ([`preappend`]), prompt
//! elections after pre-votes (`election`, `prevote`), reads at local or linearizable
//! consistency ([`read`]), membership changes ([`membership`]), and the network seam Raft
//! talks through ([`network`], [`rpc`], [`codec`]), with an in-memory router for
//! deterministic tests, and decoding with bounded nesting for everything read from a peer or
//! the disk ([`nesting`]). Also ships a linearizability checker ([`linearizability`]) and an
//! in-process cluster harness ([`testing`]).
//!
//! Must never: depend on anything of the store but its identity types; read a clock while
//! applying a command (every replica must reach the same state); accept a claim from an
//! incarnation older than the node's current epoch; answer a linearizable read without the
//! leader confirming its leadership with a quorum (the one exception is a bug planted on purpose
//! in test builds, see `planted-bug-stale-read`); let a frame or a batch exceed its configured
//! bound.

pub mod batcher;
pub mod clock;
pub mod codec;
pub mod command;
pub mod config;
pub mod directory;
mod election;
pub mod error;
mod forward;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod ids;
mod lease;
pub mod linearizability;
pub mod membership;
pub mod merge;
pub mod nesting;
pub mod network;
pub mod ordered_map;
pub mod owner;
pub mod preappend;
mod prevote;
pub mod read;
mod request_ids;
pub mod rpc;
pub mod sessions;
pub mod shard;
pub mod sorted_set;
pub mod storage;
pub mod testing;
pub mod type_config;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod planted_bug_tests;
#[cfg(test)]
mod preappend_tests;

pub use batcher::{BatchQueue, Batcher, OwnershipRecord};
pub use clock::{Clock, ManualClock, SystemClock};
pub use command::{
    Command, CommandReply, ExpiredNode, OwnershipBatch, Rejection, Request, RequestId,
};
pub use config::DirectoryConfig;
pub use directory::{Committed, Directory};
pub use error::DirectoryError;
pub use ids::{ChunkKey, Epoch, NodeId, ShardId};
pub use membership::Membership;
pub use network::{FrameTransport, InMemoryRouter, RpcServer};
pub use owner::{Liveness, NodeRecord, Owner};
pub use read::ReadConsistency;
pub use shard::ShardState;
pub use type_config::TypeConfig;
