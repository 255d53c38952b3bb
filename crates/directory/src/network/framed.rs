//! openraft's network traits over any [`FrameTransport`].

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout,
    Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use super::FrameTransport;
use crate::election::ElectionSignals;
use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::preappend::Marks;
use crate::rpc::{RpcRequest, RpcResponse};
use crate::type_config::{Node, TypeConfig};

/// Creates one [`FramedNetwork`] per peer for a member's Raft.
#[derive(Clone)]
pub struct FramedNetworkFactory {
    from: NodeId,
    transport: Arc<dyn FrameTransport>,
    frame_bytes_max: usize,
    /// Fed with the answers to this member's vote requests, and the leader lease.
    election: Option<(Arc<ElectionSignals>, Duration)>,
    /// What each voter holds from pre-appends (see [`crate::preappend`]), when they run.
    marks: Option<Arc<Marks>>,
}

impl FramedNetworkFactory {
    /// The factory of member `from`.
    pub fn new(
        from: NodeId,
        transport: Arc<dyn FrameTransport>,
        frame_bytes_max: usize,
    ) -> FramedNetworkFactory {
        FramedNetworkFactory {
            from,
            transport,
            frame_bytes_max,
            election: None,
            marks: None,
        }
    }

    /// Sends openraft's append-entries without the entries a voter already accepted in a
    /// pre-append (see [`Marks`]).
    pub(crate) fn with_preappend_marks(mut self, marks: Arc<Marks>) -> FramedNetworkFactory {
        self.marks = Some(marks);
        self
    }

    /// Feeds `signals` with the answers to this member's vote requests; `lease` is the
    /// leader lease (see [`crate::election`]).
    pub(crate) fn with_election(
        mut self,
        signals: Arc<ElectionSignals>,
        lease: Duration,
    ) -> FramedNetworkFactory {
        self.election = Some((signals, lease));
        self
    }
}

impl RaftNetworkFactory<TypeConfig> for FramedNetworkFactory {
    type Network = FramedNetwork;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> FramedNetwork {
        FramedNetwork {
            from: self.from,
            target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
            frame_bytes_max: self.frame_bytes_max,
            election: self.election.clone(),
            marks: self.marks.clone(),
        }
    }
}

/// The RPC client from one member to one peer.
pub struct FramedNetwork {
    from: NodeId,
    target: NodeId,
    addr: String,
    transport: Arc<dyn FrameTransport>,
    frame_bytes_max: usize,
    election: Option<(Arc<ElectionSignals>, Duration)>,
    marks: Option<Arc<Marks>>,
}

/// Why a call failed before a response came back.
enum CallError {
    /// The request did not fit a frame.
    TooLarge(DirectoryError),
    /// The transport gave up or the hard deadline passed.
    Timeout,
    /// The transport could not reach the peer.
    Unreachable(DirectoryError),
    /// A frame was malformed or of the wrong kind.
    Other(DirectoryError),
}

impl FramedNetwork {
    async fn call(&self, req: RpcRequest, ttl: Duration) -> Result<RpcResponse, CallError> {
        let frame = req.encode(self.frame_bytes_max).map_err(|e| match e {
            DirectoryError::FrameTooLarge { .. } => CallError::TooLarge(e),
            other => CallError::Other(other),
        })?;
        let call = self
            .transport
            .call(self.from, self.target, &self.addr, frame);
        let resp = match tokio::time::timeout(ttl, call).await {
            Err(_) => return Err(CallError::Timeout),
            Ok(Err(e @ DirectoryError::Unreachable { .. })) => {
                return Err(CallError::Unreachable(e))
            }
            Ok(Err(DirectoryError::Timeout { .. })) => return Err(CallError::Timeout),
            Ok(Err(e)) => return Err(CallError::Other(e)),
            Ok(Ok(resp)) => resp,
        };
        RpcResponse::decode(&resp, self.frame_bytes_max).map_err(CallError::Other)
    }

    fn rpc_error<E: std::error::Error>(
        &self,
        e: CallError,
        action: RPCTypes,
        ttl: Duration,
        entries: usize,
    ) -> RPCError<NodeId, Node, E> {
        match e {
            // Raft splits an append that is too large; a single entry that is too large can
            // only be reported as unreachable (openraft treats it so).
            CallError::TooLarge(_) if entries > 1 => {
                RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint((entries / 2) as u64))
            }
            CallError::TooLarge(e) | CallError::Unreachable(e) => {
                RPCError::Unreachable(Unreachable::new(&e))
            }
            CallError::Timeout => RPCError::Timeout(Timeout {
                action,
                id: self.from,
                target: self.target,
                timeout: ttl,
            }),
            CallError::Other(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }

    fn unexpected<E: std::error::Error>(
        &self,
        expected: &'static str,
        found: &RpcResponse,
    ) -> RPCError<NodeId, Node, E> {
        RPCError::Network(NetworkError::new(&DirectoryError::UnexpectedResponse {
            expected,
            found: found.kind().to_string(),
        }))
    }

    /// Sends `rpc` as it is.
    pub(crate) async fn send(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let ttl = option.hard_ttl();
        let entries = rpc.entries.len();
        match self.call(RpcRequest::AppendEntries(rpc), ttl).await {
            Err(e) => Err(self.rpc_error(e, RPCTypes::AppendEntries, ttl, entries)),
            Ok(RpcResponse::AppendEntries(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(self.unexpected("append_entries", &other)),
        }
    }
}

impl RaftNetwork<TypeConfig> for FramedNetwork {
    /// Sends openraft's request, without its entries when the voter holds them already
    /// (see [`Marks`]); a voter that refuses that check gets the whole request.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let Some(marks) = self.marks.clone() else {
            return self.send(rpc, option).await;
        };
        let Some(check) = marks.elide(self.target, &rpc) else {
            return self.send(rpc, option).await;
        };
        match self.send(check, option.clone()).await? {
            AppendEntriesResponse::Conflict => {
                marks.forget(self.target);
                self.send(rpc, option).await
            }
            other => Ok(other),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let ttl = option.hard_ttl();
        match self.call(RpcRequest::InstallSnapshot(rpc), ttl).await {
            Err(e) => Err(self.rpc_error(e, RPCTypes::InstallSnapshot, ttl, 1)),
            Ok(RpcResponse::InstallSnapshot(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(self.unexpected("install_snapshot", &other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let ttl = option.hard_ttl();
        match self.call(RpcRequest::Vote(rpc.clone()), ttl).await {
            Err(e) => Err(self.rpc_error(e, RPCTypes::Vote, ttl, 1)),
            Ok(RpcResponse::Vote(r)) => {
                if let (Some((e, lease)), Ok(resp)) = (&self.election, &r) {
                    e.vote_answered(&rpc, resp, *lease);
                }
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(self.unexpected("vote", &other)),
        }
    }
}
