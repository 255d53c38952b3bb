//! Identity newtypes of the directory: members, node incarnations, chunk keys and shards.
//!
//! Each is a distinct type so that a node id can never be passed where an epoch is expected,
//! nor a chunk key where a content id is. `NodeId` satisfies openraft's node-id bounds
//! (`Copy + Ord + Display + Default + serde`) so that one id names a node both in the fabric
//! and in the Raft group.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A fabric node, and the Raft member that runs on it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct NodeId(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// openraft's storage suite builds node ids from integers.
impl From<u64> for NodeId {
    fn from(v: u64) -> NodeId {
        NodeId(v)
    }
}

/// One incarnation of a node: every start takes a fresh, larger epoch from the directory, and
/// ownership claims that carry an older epoch are rejected.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one.
    pub const fn next(self) -> Epoch {
        Epoch(self.0 + 1)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// Chunk keys are the store's (one scheme for every crate and client: see
/// `kvfabric_store::chunk`).
pub use kvfabric_store::ChunkKey;

/// One independent Raft group of the directory, owning a range of the hash space.
///
/// One group (shard 0, the whole range) runs today; the state machine, its snapshots and its
/// store carry the shard id so that several groups can later run side by side.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ShardId(pub u32);

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard{}", self.0)
    }
}
