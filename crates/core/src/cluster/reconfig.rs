//! Live membership changes, coordinated by the member an operator asks (`POST` / `DELETE
//! /v1/operator/members`), one change at a time through it and one Raft membership step at a
//! time in the group.
//!
//! Adding member `n` (its node already running, its config naming the others):
//! 1. `n` joins the Raft group as a learner: the leader replicates the log (or a snapshot) to
//!    it, and `n`, which has been retrying its join since it started, joins the directory
//!    (a lease, an epoch) once it knows the leader;
//! 2. the coordinator waits until `n` says it is ready (its replica applied its own join and
//!    its blocks are registered: it has caught up);
//! 3. `n` is promoted to voter, and from then on new copies are placed on it.
//!
//! Removing member `n` (asked of another member):
//! 1. `n` is demoted to learner (it keeps its lease and serves what it holds, but votes no
//!    more and receives no new copies: placement only picks voters; a put it takes itself
//!    waits for `replication` copies on voters);
//! 2. `n` drains: every block it holds gets `replication` copies on other voters (`drain`),
//!    polled until `n` says it is done; a member that is not live any more cannot drain, and
//!    its blocks are re-replicated by their other holders once its lease expires (`repair`);
//! 3. `n` leaves the Raft group. Its process is then stopped by whoever runs it (`kvfabric
//!    cluster remove` does); its owner records go with its lease.
//!
//! Every step first reads the membership after a read barrier and skips what is already
//! done, and retries, within the change's bound, whatever fails for want of a leader (an
//! election under way, a leader lost during the change), so a change asked again, of any
//! member, resumes where the last attempt stopped. A removal cut short leaves `n` a learner:
//! safe (no vote, no new copies, its copies still counted and served) until it is asked again.

use std::net::SocketAddr;
use std::time::Duration;

use kvfabric_directory::{DirectoryError, NodeId as DirNodeId, ReadConsistency};
use tokio::time::Instant;

use super::control::{ControlRequest, ControlResponse};
use super::members::RaftMembers;
use super::Cluster;
use crate::config::Member;
use crate::ids::NodeId;

/// Bound on adding a member (catch-up included).
pub const ADD_TIMEOUT_MS: u64 = 120_000;
/// Bound on removing a member (its drain included).
pub const REMOVE_TIMEOUT_MS: u64 = 600_000;
/// Pause before a step is tried again.
const STEP_RETRY_MS: u64 = 500;
/// Pause between two looks at a drain's progress.
const DRAIN_POLL_MS: u64 = 500;
/// Bound on one drain request.
const DRAIN_CALL_TIMEOUT_MS: u64 = 5_000;

/// Why a membership change did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigError {
    /// The change is not allowed as asked.
    #[error("{0}")]
    Refused(String),
    /// The change did not complete within its bound; what was done stays, and asking again
    /// resumes from there.
    #[error("{step}: {reason} (what was done stays; ask again to resume)")]
    Incomplete {
        /// The step that did not complete.
        step: &'static str,
        /// Why.
        reason: String,
    },
}

/// What a completed change left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconfigured {
    /// The member added or removed.
    pub node: NodeId,
    /// Voters after the change.
    pub voters: Vec<NodeId>,
    /// Learners after the change.
    pub learners: Vec<NodeId>,
    /// Copies the leaving member made on other voters (removals).
    pub drained_copies: u64,
}

fn incomplete(step: &'static str, reason: impl ToString) -> ReconfigError {
    ReconfigError::Incomplete {
        step,
        reason: reason.to_string(),
    }
}

/// Errors a step retries: no leader, an election or another change under way, a peer or
/// the leader unreachable, a bound that ran out.
fn transient(e: &DirectoryError) -> bool {
    matches!(
        e,
        DirectoryError::NoLeader { .. }
            | DirectoryError::QuorumUnavailable { .. }
            | DirectoryError::Timeout { .. }
            | DirectoryError::Unreachable { .. }
            | DirectoryError::Membership { .. }
    )
}

impl Cluster {
    /// The membership after a read barrier (this replica has applied every committed entry).
    async fn settled_members(
        &self,
        step: &'static str,
        deadline: Instant,
    ) -> Result<RaftMembers, ReconfigError> {
        loop {
            match self
                .directory
                .read(ReadConsistency::Linearizable, |_| ())
                .await
            {
                Ok(()) => return Ok(self.raft_members()),
                Err(e) if transient(&e) && Instant::now() < deadline => {
                    tracing::info!(step, error = %e, "membership: waiting for the directory");
                    tokio::time::sleep(Duration::from_millis(STEP_RETRY_MS)).await;
                }
                Err(e) => return Err(incomplete(step, e)),
            }
        }
    }

    /// Runs `step` until `done(membership)` holds, retrying what fails for a transient reason.
    async fn step<F, Fut>(
        &self,
        name: &'static str,
        deadline: Instant,
        done: impl Fn(&RaftMembers) -> bool,
        mut step: F,
    ) -> Result<RaftMembers, ReconfigError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<u64, DirectoryError>>,
    {
        loop {
            let m = self.settled_members(name, deadline).await?;
            if done(&m) {
                return Ok(m);
            }
            if Instant::now() >= deadline {
                return Err(incomplete(name, "not done within the bound"));
            }
            match step().await {
                Ok(index) => tracing::info!(step = name, index, "membership step committed"),
                Err(e) if transient(&e) => {
                    tracing::info!(step = name, error = %e, "membership step: retrying");
                    tokio::time::sleep(Duration::from_millis(STEP_RETRY_MS)).await;
                }
                Err(e) => return Err(incomplete(name, e)),
            }
        }
    }

    /// The address the Raft membership records for member `m` (what Raft dials: its message
    /// endpoint, the block transport's address with QUIC blocks).
    fn raft_addr(&self, m: &Member) -> SocketAddr {
        super::message_peer(&self.config, m).addr
    }

    /// Adds `m` (running, not yet a member): learner, caught up, voter.
    pub(crate) async fn add_member(&self, m: Member) -> Result<Reconfigured, ReconfigError> {
        let _one = self.reconfig.lock().await;
        let deadline = Instant::now() + Duration::from_millis(ADD_TIMEOUT_MS);
        let id = m.id;
        let now = self
            .settled_members("read the membership", deadline)
            .await?;
        if let Some(known) = self.member(id) {
            if now.all().contains(&id) && known != m {
                return Err(ReconfigError::Refused(format!(
                    "{id} is a member at {} (raft {}), not at {} (raft {})",
                    known.api, known.raft, m.api, m.raft
                )));
            }
        }
        if self.config.member(id).is_none() {
            self.learned.insert(m.clone());
        }
        tracing::info!(node = %id, "adding a member: step 1, a learner");
        let addr = self.raft_addr(&m).to_string();
        self.step(
            "add as a learner",
            deadline,
            |ms| ms.all().contains(&id),
            || self.directory.add_learner(DirNodeId(id.0), addr.clone()),
        )
        .await?;
        tracing::info!(node = %id, "adding a member: step 2, caught up");
        loop {
            match self.describe(id, &addr).await {
                Ok(d) if d.ready => break,
                Ok(_) => tracing::info!(node = %id, "adding a member: not caught up yet"),
                Err(reason) => {
                    tracing::info!(node = %id, %reason, "adding a member: no answer yet")
                }
            }
            if Instant::now() >= deadline {
                return Err(incomplete(
                    "catch up",
                    format!("{id} did not report itself ready in time; it stays a learner"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(STEP_RETRY_MS)).await;
        }
        tracing::info!(node = %id, "adding a member: step 3, a voter");
        let after = self
            .step(
                "promote to voter",
                deadline,
                |ms| ms.is_voter(id),
                || {
                    self.directory
                        .promote(std::collections::BTreeSet::from([DirNodeId(id.0)]))
                },
            )
            .await?;
        tracing::info!(node = %id, voters = ?after.voters, "member added");
        Ok(Reconfigured {
            node: id,
            voters: after.voters,
            learners: after.learners,
            drained_copies: 0,
        })
    }

    /// Removes member `id`: learner, drained, out of the group.
    pub(crate) async fn remove_member(&self, id: NodeId) -> Result<Reconfigured, ReconfigError> {
        let _one = self.reconfig.lock().await;
        let deadline = Instant::now() + Duration::from_millis(REMOVE_TIMEOUT_MS);
        if id == self.me {
            return Err(ReconfigError::Refused(format!(
                "{id} coordinates this request: ask another member to remove it"
            )));
        }
        let now = self
            .settled_members("read the membership", deadline)
            .await?;
        if !now.all().contains(&id) {
            return Ok(Reconfigured {
                node: id,
                voters: now.voters,
                learners: now.learners,
                drained_copies: 0,
            });
        }
        let r = self.config.replication as usize;
        let left = now.voters.iter().filter(|v| **v != id).count();
        if left < r.max(1) {
            return Err(ReconfigError::Refused(format!(
                "removing {id} would leave {left} voter(s), fewer than the replication factor {r}"
            )));
        }
        tracing::info!(node = %id, "removing a member: step 1, a learner");
        self.step(
            "demote to learner",
            deadline,
            |ms| !ms.is_voter(id),
            || self.directory.demote(DirNodeId(id.0)),
        )
        .await?;
        tracing::info!(node = %id, "removing a member: step 2, drain");
        let drained_copies = self.drain_member(id, deadline).await?;
        tracing::info!(node = %id, drained_copies, "removing a member: step 3, out of the group");
        let after = self
            .step(
                "remove from the group",
                deadline,
                |ms| !ms.all().contains(&id),
                || self.directory.remove(DirNodeId(id.0)),
            )
            .await?;
        tracing::info!(node = %id, voters = ?after.voters, "member removed");
        Ok(Reconfigured {
            node: id,
            voters: after.voters,
            learners: after.learners,
            drained_copies,
        })
    }

    /// Polls member `id`'s drain until it is done, or until it is not live any more (its
    /// copies are then repaired by their other holders); the copies it made.
    async fn drain_member(&self, id: NodeId, deadline: Instant) -> Result<u64, ReconfigError> {
        let limit = Duration::from_millis(DRAIN_CALL_TIMEOUT_MS);
        let mut copied = 0;
        loop {
            if !self.is_live(id, self.clock.now_ms()) {
                tracing::warn!(node = %id, "the leaving member is not live: it cannot drain; its blocks' other holders re-replicate them");
                return Ok(copied);
            }
            let Some(m) = self.member(id) else {
                return Err(incomplete(
                    "drain",
                    format!("{id}'s addresses are unknown here"),
                ));
            };
            let r = self
                .control(id, self.raft_addr(&m), &ControlRequest::Drain, limit)
                .await;
            match r {
                Ok(ControlResponse::Drained {
                    held,
                    copied: c,
                    remaining,
                    done,
                }) => {
                    copied = c;
                    tracing::info!(node = %id, held, copied, remaining, done, "draining");
                    if done {
                        return Ok(copied);
                    }
                }
                Ok(other) => tracing::warn!(node = %id, ?other, "drain: unexpected answer"),
                Err(e) => tracing::info!(node = %id, error = %e, "drain: no answer; retrying"),
            }
            if Instant::now() >= deadline {
                return Err(incomplete(
                    "drain",
                    format!("{id} did not finish draining in time; it stays a learner"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
        }
    }
}
