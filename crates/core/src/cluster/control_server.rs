//! The callee side of the control channel: what a member does when another asks it to take
//! a verified copy of a block (the peer side of `replication`) or to report its tiers (for
//! `GET /v1/cluster`, with the bandwidths it measured into itself, for `POST /v1/route`).

use std::pin::Pin;
use std::sync::{Arc, Weak};

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::PeerAddr;

use super::control::{ControlHandler, ControlRequest, ControlResponse, TierUsageView};
use super::Cluster;
use crate::ids::NodeId;
use crate::local::LocalNode;

/// Answers the control requests of other members.
pub(crate) struct ControlServer {
    cluster: Weak<Cluster>,
    local: Arc<LocalNode>,
}

impl ControlServer {
    /// A handler for `cluster`'s node, storing into `local`.
    pub(crate) fn new(cluster: Weak<Cluster>, local: Arc<LocalNode>) -> ControlServer {
        ControlServer { cluster, local }
    }

    /// This node's tiers.
    fn usage(&self) -> Vec<TierUsageView> {
        match self.local.snapshot() {
            Ok(s) => s
                .usage
                .iter()
                .map(|u| TierUsageView {
                    tier: u.tier.name().to_owned(),
                    capacity: u.capacity.0,
                    used: u.used.0,
                    blocks: u.blocks,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The peer side of replication: fetch, verify, install, register, then answer.
    async fn take_copy(
        &self,
        from: u64,
        ns: NamespaceKey,
        id: BlockId,
    ) -> Result<&'static str, (&'static str, String)> {
        let cluster = self
            .cluster
            .upgrade()
            .ok_or(("shutting_down", "the node is stopping".to_owned()))?;
        let local = &self.local;
        let batcher = cluster
            .incarnation
            .batcher()
            .ok_or(("not_joined", "not joined to the directory yet".to_owned()))?;
        let held = local
            .head(&[ns], &id)
            .map_err(|e| ("store", e.to_string()))?;
        let tier = match held {
            Some((tier, _)) => tier,
            None => {
                let m = cluster
                    .config
                    .member(NodeId(from))
                    .ok_or(("unknown_member", format!("n{from} is not a member")))?;
                let peer = PeerAddr::new(m.cert_name(), m.transport);
                let started = std::time::Instant::now();
                let block = cluster
                    .transport
                    .fetch(&peer, ns, id)
                    .await
                    .map_err(|e| ("fetch_failed", e.to_string()))?;
                cluster.bandwidth.record(
                    NodeId(from),
                    block.bytes().len() as u64,
                    started.elapsed(),
                );
                let engine = crate::events::poll::peer_engine(&cluster, NodeId(from), ns, id).await;
                local
                    .install_with(&block, engine)
                    .map_err(|e| ("store", e.to_string()))?
            }
        };
        batcher
            .claim(super::directory_block(&ns, id), tier, None)
            .await
            .map_err(|e| ("directory", e.to_string()))?;
        Ok(tier.name())
    }
}

impl ControlHandler for ControlServer {
    fn handle(
        &self,
        req: ControlRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = ControlResponse> + Send + '_>> {
        Box::pin(async move {
            match req {
                ControlRequest::Replicate {
                    from,
                    namespace,
                    block,
                } => match self.take_copy(from, namespace, block).await {
                    Ok(tier) => ControlResponse::Replicated {
                        tier: tier.to_owned(),
                    },
                    Err((code, message)) => {
                        tracing::warn!(%block, from, code, %message, "replica refused");
                        ControlResponse::Refused {
                            code: code.to_owned(),
                            message,
                        }
                    }
                },
                ControlRequest::Events {
                    epoch,
                    since,
                    first,
                } => match self.local.event_log() {
                    Ok(Some(log)) => ControlResponse::Events(crate::events::poll::serve(
                        &log, epoch, since, first,
                    )),
                    _ => ControlResponse::Refused {
                        code: "no_events".to_owned(),
                        message: "this member's event log is not open".to_owned(),
                    },
                },
                ControlRequest::BlockInfo { namespace, block } => ControlResponse::BlockInfo {
                    info: self.local.info(&namespace, &block).ok().flatten(),
                },
                ControlRequest::Usage => ControlResponse::Usage {
                    tiers: self.usage(),
                    inbound: self
                        .cluster
                        .upgrade()
                        .map(|c| c.bandwidth.inbound())
                        .unwrap_or_default(),
                },
            }
        })
    }
}
