//! Changing who replicates the shard: add a learner, promote learners to voters, demote a
//! voter to a learner, remove members. Each change runs on the leader (forwarded when needed) and returns its log index.

use std::collections::BTreeSet;

use openraft::ChangeMembers;

use crate::directory::{write_error, Directory};
use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::rpc::{ForwardRequest, ForwardResponse};

/// The members of the shard's Raft group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Members that vote (a majority of them commits).
    pub voters: BTreeSet<NodeId>,
    /// Members that replicate without voting.
    pub learners: BTreeSet<NodeId>,
}

impl Directory {
    /// Adds `node` (reachable at `addr`) as a learner and waits until it has caught up.
    pub async fn add_learner(&self, node: NodeId, addr: String) -> Result<u64, DirectoryError> {
        self.membership_call(ForwardRequest::AddLearner { node, addr })
            .await
    }

    /// Makes learners voters.
    pub async fn promote(&self, nodes: BTreeSet<NodeId>) -> Result<u64, DirectoryError> {
        let changes = ChangeMembers::AddVoterIds(nodes);
        self.membership_call(ForwardRequest::ChangeMembership {
            changes,
            retain: false,
        })
        .await
    }

    /// Replaces the voter set (every new voter must already be a learner); voters left out
    /// are removed.
    pub async fn change_membership(&self, voters: BTreeSet<NodeId>) -> Result<u64, DirectoryError> {
        let changes = ChangeMembers::ReplaceAllVoters(voters);
        self.membership_call(ForwardRequest::ChangeMembership {
            changes,
            retain: false,
        })
        .await
    }

    /// Makes voter `node` a learner: it keeps replicating, stops voting.
    pub async fn demote(&self, node: NodeId) -> Result<u64, DirectoryError> {
        let changes = ChangeMembers::RemoveVoters(BTreeSet::from([node]));
        self.membership_call(ForwardRequest::ChangeMembership {
            changes,
            retain: true,
        })
        .await
    }

    /// Removes `node` from the group, voter or learner.
    pub async fn remove(&self, node: NodeId) -> Result<u64, DirectoryError> {
        let is_voter = self.membership().voters.contains(&node);
        let set = BTreeSet::from([node]);
        let changes = if is_voter {
            ChangeMembers::RemoveVoters(set)
        } else {
            ChangeMembers::RemoveNodes(set)
        };
        self.membership_call(ForwardRequest::ChangeMembership {
            changes,
            retain: false,
        })
        .await
    }

    /// The membership this member has seen (possibly not yet committed).
    pub fn membership(&self) -> Membership {
        let m = self.inner.raft.metrics();
        let m = m.borrow();
        let mem = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = mem.voter_ids().collect();
        let learners = mem.learner_ids().collect();
        Membership { voters, learners }
    }

    async fn membership_call(&self, req: ForwardRequest) -> Result<u64, DirectoryError> {
        let limit_ms = self.inner.config.write_timeout_ms;
        match self.on_leader(req, limit_ms, "membership change").await? {
            ForwardResponse::Write(Ok((index, _))) => Ok(index),
            ForwardResponse::Write(Err(e)) => Err(write_error(e)),
            other => Err(DirectoryError::UnexpectedResponse {
                expected: "membership change",
                found: format!("{other:?}"),
            }),
        }
    }
}
