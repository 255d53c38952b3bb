//! Running leader-only operations from any member: locally when it leads, else forwarded over
//! the transport to the leader it knows of, following "not the leader" hints, bounded in
//! attempts and time. A forward in flight is abandoned (and retried) as soon as the member
//! sees the leadership move, so a dead leader costs an election, not an RPC timeout.

use std::time::Duration;

use crate::directory::Directory;
use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::network::server::forward_hint;
use crate::rpc::{ForwardRequest, ForwardResponse, RpcRequest, RpcResponse};

impl Directory {
    /// Runs `req` on the leader: locally when this member leads, else forwarded over the
    /// transport, following "not the leader" hints, for at most `forward_attempts_max`
    /// attempts and `limit_ms` in all.
    pub(crate) async fn on_leader(
        &self,
        req: ForwardRequest,
        limit_ms: u64,
        op: &'static str,
    ) -> Result<ForwardResponse, DirectoryError> {
        let attempt = self.on_leader_unbounded(req);
        tokio::time::timeout(Duration::from_millis(limit_ms), attempt)
            .await
            .map_err(|_| DirectoryError::Timeout { op, limit_ms })?
    }

    async fn on_leader_unbounded(
        &self,
        req: ForwardRequest,
    ) -> Result<ForwardResponse, DirectoryError> {
        let backoff = Duration::from_millis(self.inner.config.heartbeat_interval_ms);
        let attempts_max = self.inner.config.forward_attempts_max;
        let mut hint: Option<NodeId> = None;
        for _ in 0..attempts_max {
            let Some(leader) = hint.take().or_else(|| self.current_leader()) else {
                tokio::time::sleep(backoff).await;
                continue;
            };
            let resp = if leader == self.inner.id {
                self.inner.server.forward(req.clone()).await
            } else {
                // A leader that died does not answer: rather than wait out the RPC timeout,
                // give up on it as soon as this member sees the leadership move (an election
                // starts or ends). A write sent twice this way applies once (request ids).
                tokio::select! {
                    r = self.forward_to(leader, req.clone()) => r,
                    () = self.leader_moved(leader) => Err(DirectoryError::Unreachable {
                        node: leader,
                        reason: "the leadership moved while the request was in flight".into(),
                    }),
                }
            };
            match resp {
                Ok(r) => match forward_hint(&r) {
                    // Not the leader: follow its hint once, else wait for an election.
                    Some(next) => {
                        hint = next.filter(|n| *n != leader);
                        if hint.is_none() {
                            tokio::time::sleep(backoff).await;
                        }
                    }
                    None => return Ok(r),
                },
                Err(
                    DirectoryError::Unreachable { .. }
                    | DirectoryError::Timeout { .. }
                    | DirectoryError::BadFrame { .. },
                ) => tokio::time::sleep(backoff).await,
                Err(e) => return Err(e),
            }
        }
        Err(DirectoryError::NoLeader {
            leader: self.current_leader(),
            attempts: attempts_max,
        })
    }

    /// Resolves once this member no longer takes `from` for the leader.
    async fn leader_moved(&self, from: NodeId) {
        let mut metrics = self.inner.raft.metrics();
        loop {
            if metrics.borrow().current_leader != Some(from) {
                return;
            }
            if metrics.changed().await.is_err() {
                // Raft stopped: the forward itself will end (the member is shutting down).
                std::future::pending::<()>().await;
            }
        }
    }

    async fn forward_to(
        &self,
        leader: NodeId,
        req: ForwardRequest,
    ) -> Result<ForwardResponse, DirectoryError> {
        let addr = {
            let m = self.inner.raft.metrics();
            let m = m.borrow();
            m.membership_config
                .membership()
                .get_node(&leader)
                .map(|n| n.addr.clone())
        };
        let Some(addr) = addr else {
            return Err(DirectoryError::Unreachable {
                node: leader,
                reason: "not in the membership this member knows".into(),
            });
        };
        let max = self.inner.config.frame_bytes_max as usize;
        let resp = RpcRequest::Forward(req)
            .call(&*self.inner.transport, self.inner.id, leader, &addr, max)
            .await?;
        match resp {
            RpcResponse::Forward(f) => Ok(f),
            other => Err(DirectoryError::UnexpectedResponse {
                expected: "forward",
                found: other.kind().to_string(),
            }),
        }
    }
}
