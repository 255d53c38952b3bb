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

/// A chunk key computed by clients from tokens (prefix-chained or position-independent; the
/// directory does not distinguish them: both are 32 opaque bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChunkKey(pub [u8; 32]);

impl ChunkKey {
    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<ChunkKey, kvfabric_store::id::ParseIdError> {
        kvfabric_store::id::parse_hex32(s).map(ChunkKey)
    }

    /// Lowercase hex (64 chars).
    pub fn to_hex(&self) -> String {
        kvfabric_store::BlockId(self.0).to_hex()
    }
}

impl fmt::Debug for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

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
