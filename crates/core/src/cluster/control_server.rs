//! The callee side of the control channel: what a member does when another asks it to take
//! a verified copy of a block (the peer side of `replication`), to describe itself (a member
//! added at run time) or to drain before it leaves (`drain`) or to report its tiers (for
//! `GET /v1/cluster`, with the bandwidths it measured into itself, for `POST /v1/route`, and
//! its counters, for the operator's dashboard).

use std::pin::Pin;
use std::sync::{Arc, Weak};

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::PeerAddr;

use super::control::{ControlHandler, ControlRequest, ControlResponse, TierUsageView};
use super::stats::MemberStats;
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

    /// This node's tiers and counters.
    fn usage(&self) -> ControlResponse {
        let cluster = self.cluster.upgrade();
        let inbound = cluster
            .as_ref()
            .map(|c| c.bandwidth.inbound())
            .unwrap_or_default();
        let Ok(s) = self.local.snapshot() else {
            return ControlResponse::Usage {
                tiers: Vec::new(),
                inbound,
                stats: None,
            };
        };
        let transport = cluster.as_ref().map(|c| c.transport.counters());
        ControlResponse::Usage {
            tiers: s
                .usage
                .iter()
                .map(|u| TierUsageView {
                    tier: u.tier.name().to_owned(),
                    capacity: u.capacity.0,
                    used: u.used.0,
                    blocks: u.blocks,
                })
                .collect(),
            inbound,
            stats: Some(MemberStats::of(
                &s,
                self.local.reads_not_found(),
                transport.as_ref(),
            )),
        }
    }

    /// Who this member is and whether it is ready.
    fn describe(&self) -> ControlResponse {
        let Some(cluster) = self.cluster.upgrade() else {
            return refused("shutting_down", "the node is stopping");
        };
        match cluster.me_member() {
            Some(m) => ControlResponse::Member {
                id: m.id.0,
                api: m.api,
                transport: m.transport,
                raft: m.raft,
                ready: cluster.ready().is_ok(),
            },
            None => refused("not_configured", "this node's config does not list it"),
        }
    }

    /// The leaving member's drain: started by the first request, its progress.
    fn drain(&self) -> ControlResponse {
        let Some(cluster) = self.cluster.upgrade() else {
            return refused("shutting_down", "the node is stopping");
        };
        match cluster.drain() {
            Ok(p) => ControlResponse::Drained {
                held: p.held,
                copied: p.copied,
                remaining: p.remaining,
                done: p.done,
            },
            Err(message) => refused("store", &message),
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

fn refused(code: &str, message: &str) -> ControlResponse {
    ControlResponse::Refused {
        code: code.to_owned(),
        message: message.to_owned(),
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
                ControlRequest::Usage => self.usage(),
                ControlRequest::Describe => self.describe(),
                ControlRequest::Drain => self.drain(),
            }
        })
    }
}
