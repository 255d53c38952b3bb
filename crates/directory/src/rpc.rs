//! The messages members exchange: openraft's three RPCs plus requests forwarded to the leader.
//!
//! Both enums travel as [`codec`](crate::codec) frames; whatever carries the frames (the
//! in-memory router, a QUIC stream) never looks inside them.

use openraft::error::{CheckIsLeaderError, ClientWriteError, InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::ChangeMembers;
use serde::{Deserialize, Serialize};

use crate::codec::{decode_frame, encode_frame, FrameKind};
use crate::command::{CommandReply, Request};
use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::network::FrameTransport;
use crate::type_config::{Node, TypeConfig};

/// A request from one member to another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RpcRequest {
    /// Raft: replicate entries / heartbeat.
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// Raft: request a vote.
    Vote(VoteRequest<NodeId>),
    /// Raft: one chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// An operation only the leader can do, forwarded by a member that is not the leader.
    Forward(ForwardRequest),
    /// Would the voter grant a vote now? Changes nothing ([`crate::prevote`]).
    PreVote(PreVoteRequest),
}

/// A member asks whether a voter has lost its leader too ([`crate::prevote`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The member that would stand.
    pub candidate: NodeId,
}

/// The voter's answer to a [`PreVoteRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteResponse {
    /// Whether it would vote: it does not lead and has heard no leader for
    /// `election_timeout_min_ms`.
    pub granted: bool,
}

/// What a member forwards to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ForwardRequest {
    /// Propose a request (retries reuse its id).
    Write(Request),
    /// Confirm leadership with a quorum and return the index a linearizable read must wait for.
    ReadIndex,
    /// Add a learner (and wait until it has caught up).
    AddLearner {
        /// The new member.
        node: NodeId,
        /// Its RPC address.
        addr: String,
    },
    /// Change the voter set or remove members.
    ChangeMembership {
        /// The change.
        changes: ChangeMembers<NodeId, Node>,
        /// Keep removed voters as learners.
        retain: bool,
    },
}

/// Raft's error for writes and membership changes.
pub type WriteError = RaftError<NodeId, ClientWriteError<NodeId, Node>>;
/// Raft's error for read-index requests.
pub type ReadIndexError = RaftError<NodeId, CheckIsLeaderError<NodeId, Node>>;

/// What the leader answered to a forwarded request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ForwardResponse {
    /// A write or membership change: its log index and reply, or Raft's error.
    Write(Result<(u64, CommandReply), WriteError>),
    /// The read index (`None` for an empty log), or Raft's error.
    ReadIndex(Result<Option<u64>, ReadIndexError>),
}

/// The answer to an [`RpcRequest`], variant for variant.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    /// Answer to [`RpcRequest::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// Answer to [`RpcRequest::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// Answer to [`RpcRequest::InstallSnapshot`].
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    /// Answer to [`RpcRequest::Forward`].
    Forward(ForwardResponse),
    /// Answer to [`RpcRequest::PreVote`].
    PreVote(PreVoteResponse),
}

impl RpcRequest {
    /// Short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            RpcRequest::AppendEntries(_) => "append_entries",
            RpcRequest::Vote(_) => "vote",
            RpcRequest::InstallSnapshot(_) => "install_snapshot",
            RpcRequest::Forward(_) => "forward",
            RpcRequest::PreVote(_) => "pre_vote",
        }
    }

    /// One request frame.
    pub fn encode(&self, frame_bytes_max: usize) -> Result<Vec<u8>, DirectoryError> {
        encode_frame(FrameKind::Request, self, frame_bytes_max)
    }

    /// Checks and decodes a request frame.
    pub fn decode(frame: &[u8], frame_bytes_max: usize) -> Result<RpcRequest, DirectoryError> {
        decode_frame(FrameKind::Request, frame, frame_bytes_max)
    }

    /// Sends this request from member `from` to member `to` (at `addr`) over `transport`
    /// and decodes the answer, both frames bounded by `frame_bytes_max`.
    pub(crate) async fn call(
        &self,
        transport: &dyn FrameTransport,
        from: NodeId,
        to: NodeId,
        addr: &str,
        frame_bytes_max: usize,
    ) -> Result<RpcResponse, DirectoryError> {
        let frame = self.encode(frame_bytes_max)?;
        let resp = transport.call(from, to, addr, frame).await?;
        RpcResponse::decode(&resp, frame_bytes_max)
    }
}

impl RpcResponse {
    /// Short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            RpcResponse::AppendEntries(_) => "append_entries",
            RpcResponse::Vote(_) => "vote",
            RpcResponse::InstallSnapshot(_) => "install_snapshot",
            RpcResponse::Forward(_) => "forward",
            RpcResponse::PreVote(_) => "pre_vote",
        }
    }

    /// One response frame.
    pub fn encode(&self, frame_bytes_max: usize) -> Result<Vec<u8>, DirectoryError> {
        encode_frame(FrameKind::Response, self, frame_bytes_max)
    }

    /// Checks and decodes a response frame.
    pub fn decode(frame: &[u8], frame_bytes_max: usize) -> Result<RpcResponse, DirectoryError> {
        decode_frame(FrameKind::Response, frame, frame_bytes_max)
    }
}
