//! The openraft type configuration of the directory, and short names for its generic types.

use std::io::Cursor;

use crate::command::{CommandReply, Request};
use crate::ids::NodeId;

openraft::declare_raft_types!(
    /// The directory's Raft types: requests (deduplicated commands) in, replies out, `NodeId` members addressed by a
    /// `BasicNode` (its RPC address), snapshots as in-memory byte buffers.
    pub TypeConfig:
        D = Request,
        R = CommandReply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

/// A running Raft member of the directory.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A member's address record.
pub type Node = openraft::BasicNode;
/// openraft's storage error for this config.
pub type StorageError = openraft::StorageError<NodeId>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
/// The membership as stored with its log id.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Raft metrics of a member.
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;
