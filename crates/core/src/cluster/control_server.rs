//! The callee side of the control channel: what a member answers when another asks for its
//! tiers (for `GET /v1/cluster`), with the bandwidths it measured into itself (for
//! `POST /v1/route`).

use std::sync::{Arc, Weak};

use kvfabric_transport::{MessageHandler, TransportFuture};

use super::control::{decode, encode, ControlRequest, ControlResponse, TierUsageView};
use super::Cluster;
use crate::local::LocalNode;

/// Answers the control requests of other members.
pub(crate) struct ControlServer {
    cluster: Weak<Cluster>,
    local: Arc<LocalNode>,
}

impl ControlServer {
    /// A handler for `cluster`'s node, reporting `local`'s tiers.
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
            Err(_) => Vec::new(),
        }
    }

    fn answer(&self, req: ControlRequest) -> ControlResponse {
        match req {
            ControlRequest::Usage => ControlResponse::Usage {
                tiers: self.usage(),
                inbound: self
                    .cluster
                    .upgrade()
                    .map(|c| c.bandwidth.inbound())
                    .unwrap_or_default(),
            },
        }
    }
}

impl MessageHandler for ControlServer {
    fn handle(&self, request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            let resp = match decode::<ControlRequest>(&request, "a control request") {
                Ok(req) => self.answer(req),
                Err(e) => ControlResponse::Refused {
                    code: "bad_request".into(),
                    message: e.to_string(),
                },
            };
            Some(encode(&resp))
        })
    }
}
