//! Reads: from the local replica by default, linearizable (read index) on request.

use std::time::{Duration, Instant};

use kvfabric_store::BlockId;
use openraft::error::{CheckIsLeaderError, RaftError};

use crate::directory::Directory;
use crate::error::DirectoryError;
use crate::ids::{ChunkKey, NodeId};
use crate::owner::{NodeRecord, Owner};
use crate::rpc::{ForwardRequest, ForwardResponse, ReadIndexError};
use crate::shard::ShardState;

/// How fresh a read must be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadConsistency {
    /// Whatever this member has applied: fast, possibly behind the leader.
    #[default]
    Local,
    /// Reflects every write completed before the read began: the leader confirms its
    /// leadership with a quorum and names a read index, and this member waits until it has
    /// applied that index before reading.
    Linearizable,
}

impl Directory {
    /// Runs `f` on the state, at the consistency asked for.
    pub async fn read<R>(
        &self,
        consistency: ReadConsistency,
        f: impl FnOnce(&ShardState) -> R,
    ) -> Result<R, DirectoryError> {
        if consistency == ReadConsistency::Linearizable {
            self.read_barrier().await?;
        }
        Ok(self.inner.view.read(f))
    }

    /// The holders of `block`.
    pub async fn owners(
        &self,
        block: &BlockId,
        consistency: ReadConsistency,
    ) -> Result<Vec<Owner>, DirectoryError> {
        self.read(consistency, |s| s.owners(block)).await
    }

    /// The block a chunk key names.
    pub async fn resolve(
        &self,
        chunk: &ChunkKey,
        consistency: ReadConsistency,
    ) -> Result<Option<BlockId>, DirectoryError> {
        self.read(consistency, |s| s.resolve(chunk)).await
    }

    /// The directory's record of `node` (epoch, lease, liveness).
    pub async fn node_record(
        &self,
        node: NodeId,
        consistency: ReadConsistency,
    ) -> Result<Option<NodeRecord>, DirectoryError> {
        self.read(consistency, |s| s.node(node)).await
    }

    /// Waits until this member's state reflects every write completed before the call,
    /// within `read_timeout_ms`.
    async fn read_barrier(&self) -> Result<(), DirectoryError> {
        #[cfg(any(test, feature = "planted-bug-stale-read"))]
        if self
            .inner
            .planted_stale_read
            .load(std::sync::atomic::Ordering::SeqCst)
            && self.current_leader() == Some(self.inner.id)
        {
            // The planted bug: trust one's own belief of leadership instead of asking a quorum.
            // A deposed leader cut off from the others still believes it, and answers stale.
            return Ok(());
        }
        let limit_ms = self.inner.config.read_timeout_ms;
        let start = Instant::now();
        let index = match self
            .on_leader(ForwardRequest::ReadIndex, limit_ms, "read index")
            .await?
        {
            ForwardResponse::ReadIndex(Ok(index)) => index,
            ForwardResponse::ReadIndex(Err(e)) => return Err(read_index_error(e)),
            other => {
                return Err(DirectoryError::UnexpectedResponse {
                    expected: "read index",
                    found: format!("{other:?}"),
                })
            }
        };
        let left = Duration::from_millis(limit_ms).saturating_sub(start.elapsed());
        self.inner
            .raft
            .wait(Some(left))
            .applied_index_at_least(index, "linearizable read")
            .await
            .map_err(|_| DirectoryError::Timeout {
                op: "apply up to the read index",
                limit_ms,
            })?;
        Ok(())
    }

    /// Plants the bug the linearizability checker must catch: from now on, when this member
    /// believes it is the leader, a linearizable read skips the read index. Test builds only.
    #[cfg(any(test, feature = "planted-bug-stale-read"))]
    pub fn plant_stale_read_bug(&self) {
        self.inner
            .planted_stale_read
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn read_index_error(e: ReadIndexError) -> DirectoryError {
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => DirectoryError::NoLeader {
            leader: f.leader_id,
            attempts: 1,
        },
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
            DirectoryError::QuorumUnavailable {
                reason: q.to_string(),
            }
        }
        RaftError::Fatal(f) => DirectoryError::Stopped {
            reason: f.to_string(),
        },
    }
}
