//! The callee side of every RPC: decodes a request frame, runs it on the local Raft member,
//! encodes the response.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState};

use crate::command::Command;
use crate::config::DirectoryConfig;
use crate::election::ElectionSignals;
use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::merge::WriteMerger;
use crate::prevote;
use crate::rpc::{ForwardRequest, ForwardResponse, PreVoteResponse, RpcRequest, RpcResponse};
use crate::type_config::Raft;

/// Serves one member's RPCs. Cheap to clone.
#[derive(Clone)]
pub struct RpcServer {
    raft: Raft,
    merger: WriteMerger,
    frame_bytes_max: usize,
    write_timeout: Duration,
    read_timeout: Duration,
    /// Fed with what this member answered to AppendEntries and votes; read by pre-votes.
    election: Arc<ElectionSignals>,
    /// How long a voter must have heard no leader to grant a pre-vote
    /// (`election_timeout_min_ms`).
    prevote_quiet: Duration,
}

impl RpcServer {
    /// A server for `raft`, bounded by `config`; `client` names the leader's merged entries
    /// (see [`WriteMerger`]). Must be called within a tokio runtime.
    pub(crate) fn new(
        raft: Raft,
        config: &DirectoryConfig,
        client: u64,
        election: Arc<ElectionSignals>,
    ) -> RpcServer {
        RpcServer {
            merger: WriteMerger::spawn(
                raft.clone(),
                config.batch_records_max,
                config.batch_inflight_max,
                client,
            ),
            raft,
            frame_bytes_max: config.frame_bytes_max as usize,
            write_timeout: Duration::from_millis(config.write_timeout_ms),
            read_timeout: Duration::from_millis(config.read_timeout_ms),
            election,
            prevote_quiet: Duration::from_millis(config.election_timeout_min_ms),
        }
    }

    /// Handles one request frame and returns the response frame.
    pub async fn handle_frame(&self, frame: &[u8]) -> Result<Vec<u8>, DirectoryError> {
        let req = RpcRequest::decode(frame, self.frame_bytes_max)?;
        let resp = self.handle(req).await?;
        resp.encode(self.frame_bytes_max)
    }

    /// Handles one decoded request.
    pub async fn handle(&self, req: RpcRequest) -> Result<RpcResponse, DirectoryError> {
        Ok(match req {
            RpcRequest::AppendEntries(r) => {
                let resp = self.raft.append_entries(r).await;
                if let Ok(resp) = &resp {
                    self.election.appended(resp);
                }
                RpcResponse::AppendEntries(resp)
            }
            RpcRequest::Vote(r) => {
                let resp = self.raft.vote(r.clone()).await;
                if let Ok(resp) = &resp {
                    self.election.voted(&r, resp);
                }
                RpcResponse::Vote(resp)
            }
            RpcRequest::InstallSnapshot(r) => {
                RpcResponse::InstallSnapshot(self.raft.install_snapshot(r).await)
            }
            RpcRequest::Forward(f) => RpcResponse::Forward(self.forward(f).await?),
            RpcRequest::PreVote(_) => RpcResponse::PreVote(self.pre_vote()),
        })
    }

    /// Whether this member would vote now (see [`crate::prevote`]).
    fn pre_vote(&self) -> PreVoteResponse {
        let leads = self.raft.metrics().borrow().state == ServerState::Leader;
        let granted = prevote::grants(
            tokio::time::Instant::now(),
            leads,
            self.election.snapshot().contact,
            self.prevote_quiet,
        );
        PreVoteResponse { granted }
    }

    /// Runs a request that needs the leader on this member (which answers ForwardToLeader if it
    /// is not the leader). Bounded by the write or read timeout.
    pub(crate) async fn forward(
        &self,
        req: ForwardRequest,
    ) -> Result<ForwardResponse, DirectoryError> {
        match req {
            ForwardRequest::Write(request) => {
                let r = if matches!(request.command, Command::Ownership(_)) {
                    tokio::time::timeout(self.write_timeout, self.merger.write(request))
                        .await
                        .map_err(|_| self.timeout("forwarded write", self.write_timeout))?
                        .ok_or_else(|| DirectoryError::Stopped {
                            reason: "the member is shutting down".into(),
                        })?
                } else {
                    tokio::time::timeout(self.write_timeout, self.raft.client_write(request))
                        .await
                        .map_err(|_| self.timeout("forwarded write", self.write_timeout))?
                        .map(|resp| (resp.log_id.index, resp.data))
                };
                Ok(ForwardResponse::Write(r))
            }
            ForwardRequest::ReadIndex => {
                let read = self.raft.get_read_log_id();
                let r = tokio::time::timeout(self.read_timeout, read)
                    .await
                    .map_err(|_| self.timeout("read index", self.read_timeout))?;
                Ok(ForwardResponse::ReadIndex(r.map(
                    |(read_log_id, _applied)| read_log_id.map(|l| l.index),
                )))
            }
            ForwardRequest::AddLearner { node, addr } => {
                let add = self.raft.add_learner(node, BasicNode { addr }, true);
                let r = tokio::time::timeout(self.write_timeout, add)
                    .await
                    .map_err(|_| self.timeout("add learner", self.write_timeout))?;
                Ok(ForwardResponse::Write(
                    r.map(|resp| (resp.log_id.index, resp.data)),
                ))
            }
            ForwardRequest::ChangeMembership { changes, retain } => {
                let change = self.raft.change_membership(changes, retain);
                let r = tokio::time::timeout(self.write_timeout, change)
                    .await
                    .map_err(|_| self.timeout("change membership", self.write_timeout))?;
                Ok(ForwardResponse::Write(
                    r.map(|resp| (resp.log_id.index, resp.data)),
                ))
            }
        }
    }

    fn timeout(&self, op: &'static str, limit: Duration) -> DirectoryError {
        DirectoryError::Timeout {
            op,
            limit_ms: limit.as_millis() as u64,
        }
    }
}

/// The leader a [`ForwardResponse`] points to, when it says "not the leader, ask X".
/// `Some(None)` means "not the leader, and no leader known".
pub(crate) fn forward_hint(resp: &ForwardResponse) -> Option<Option<NodeId>> {
    match resp {
        ForwardResponse::Write(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
            Some(f.leader_id)
        }
        ForwardResponse::ReadIndex(Err(RaftError::APIError(
            openraft::error::CheckIsLeaderError::ForwardToLeader(f),
        ))) => Some(f.leader_id),
        _ => None,
    }
}
