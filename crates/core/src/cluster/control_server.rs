//! The callee side of the control channel: what a member answers when another asks it to
//! describe itself (a member added at run time), to drain before it leaves (`drain`), for its
//! event batches or a block's engine identity (the cluster feed, `events::poll`), or for its
//! tiers (for `GET /v1/cluster`, with the bandwidths it measured into itself, for
//! `POST /v1/route`, and its counters, for the operator's dashboard). Copies are not asked
//! for here: they are pushed on the block transport (`source`).

use std::sync::{Arc, Weak};

use kvfabric_transport::{MessageHandler, TransportFuture};

use super::control::{decode, encode, ControlRequest, ControlResponse, TierUsageView};
use super::stats::MemberStats;
use super::Cluster;
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

    fn answer(&self, req: ControlRequest) -> ControlResponse {
        match req {
            ControlRequest::Events {
                epoch,
                since,
                first,
            } => match self.local.event_log() {
                Ok(Some(log)) => {
                    ControlResponse::Events(crate::events::poll::serve(&log, epoch, since, first))
                }
                _ => refused("no_events", "this member's event log is not open"),
            },
            ControlRequest::BlockInfo { namespace, block } => ControlResponse::BlockInfo {
                info: self.local.info(&namespace, &block).ok().flatten(),
            },
            ControlRequest::Offer {
                namespace,
                block,
                engine,
            } => match self.cluster.upgrade() {
                Some(c) => {
                    let now_ms = c.clock.now_ms();
                    c.offers.keep(namespace, block, Arc::new(engine), now_ms);
                    ControlResponse::Offered
                }
                None => refused("shutting_down", "the node is stopping"),
            },
            ControlRequest::Usage => self.usage(),
            ControlRequest::Describe => self.describe(),
            ControlRequest::Drain => self.drain(),
        }
    }
}

fn refused(code: &str, message: &str) -> ControlResponse {
    ControlResponse::Refused {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

impl MessageHandler for ControlServer {
    fn handle(&self, request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            let resp = match decode::<ControlRequest>(&request, "a control request") {
                Ok(req) => self.answer(req),
                Err(e) => refused("bad_request", &e.to_string()),
            };
            Some(encode(&resp))
        })
    }
}
