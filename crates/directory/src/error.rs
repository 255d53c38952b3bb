//! The one error type of the directory's API.

use crate::command::Rejection;
use crate::ids::{NodeId, ShardId};

/// Everything a directory call can fail with. Messages say what was expected and what was
/// found. `Clone` so that one batch failure can be handed to every caller waiting on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    /// A configuration field is out of range or inconsistent with another field.
    #[error("config {field}: expected {expected}, found {found}")]
    Config {
        /// The offending field.
        field: &'static str,
        /// What would have been accepted.
        expected: String,
        /// What was given.
        found: String,
    },
    /// The member's store (the WAL or redb) failed.
    #[error("storage {op} failed: {reason}")]
    Storage {
        /// What was being done.
        op: &'static str,
        /// The store's message.
        reason: String,
    },
    /// A store or snapshot belongs to another shard.
    #[error("expected data of {expected}, found {found}")]
    ShardMismatch {
        /// The shard this member runs.
        expected: ShardId,
        /// The shard the data names.
        found: ShardId,
    },
    /// A persisted snapshot or log record does not decode.
    #[error("corrupt {what}: {reason}")]
    Corrupt {
        /// Which record.
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The state machine refused the command (stale epoch, expired lease, unknown node); the
    /// refusal itself is committed and the state is unchanged.
    #[error("command rejected: {0:?}")]
    Rejected(Rejection),
    /// The operation needs the leader, none answered within the bounded retries.
    #[error("expected a reachable leader, found {leader:?} after {attempts} attempts")]
    NoLeader {
        /// The last leader this member knew of.
        leader: Option<NodeId>,
        /// Attempts made.
        attempts: u32,
    },
    /// The leader could not confirm its leadership with a quorum (read index).
    #[error("quorum not reached for a linearizable read: {reason}")]
    QuorumUnavailable {
        /// What openraft reported.
        reason: String,
    },
    /// A bounded wait ran out.
    #[error("{op}: expected completion within {limit_ms} ms, found none")]
    Timeout {
        /// What was waited for.
        op: &'static str,
        /// The bound.
        limit_ms: u64,
    },
    /// The Raft member stopped (shut down or a fatal storage error).
    #[error("raft member stopped: {reason}")]
    Stopped {
        /// Why.
        reason: String,
    },
    /// A membership change was refused.
    #[error("membership change refused: {reason}")]
    Membership {
        /// openraft's reason.
        reason: String,
    },
    /// The network could not carry a request to `node`.
    #[error("{node} unreachable: {reason}")]
    Unreachable {
        /// The target.
        node: NodeId,
        /// The transport's reason.
        reason: String,
    },
    /// A frame is larger than the configured bound.
    #[error("frame of at most {limit} bytes expected, found {found}")]
    FrameTooLarge {
        /// The bound (`frame_bytes_max`).
        limit: usize,
        /// The frame's length.
        found: usize,
    },
    /// A frame failed a check before its body was trusted.
    #[error("bad frame: expected {expected}, found {found}")]
    BadFrame {
        /// What the check wanted.
        expected: String,
        /// What the frame had.
        found: String,
    },
    /// The peer answered a request with a response of another kind.
    #[error("expected a {expected} response, found {found}")]
    UnexpectedResponse {
        /// The kind asked for.
        expected: &'static str,
        /// The kind received.
        found: String,
    },
    /// The batcher's task ended (its directory shut down).
    #[error("batcher closed")]
    BatcherClosed,
}

impl DirectoryError {
    /// Maps a storage (WAL, redb, file system) error.
    pub(crate) fn storage(op: &'static str, e: impl std::fmt::Display) -> DirectoryError {
        DirectoryError::Storage {
            op,
            reason: e.to_string(),
        }
    }
}
