//! The HTTP API (axum on hyper, HTTP/1.1): routes, errors, tenancy, metrics, and the bounded
//! server loop.
//!
//! State is one [`App`] per node, shared by every request. The store behind it is reached
//! only through [`LocalNode`], whose lock is never held across an `await`.

mod body;
pub(crate) mod errors;
mod headers;
pub(crate) mod metrics;
mod routes;
pub(crate) mod serve;
pub(crate) mod tenancy;
mod track;

use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

use crate::cluster::Cluster;
use crate::config::Limits;
use crate::events::EventLog;
use crate::ids::NodeId;
use crate::local::LocalNode;
use crate::presets::Catalog;
use errors::ApiError;
use metrics::Metrics;
use tenancy::Tenancy;

pub(crate) use routes::router;

/// Everything a request handler may use.
pub(crate) struct App {
    /// This node.
    pub(crate) node_id: NodeId,
    /// This node's API address as clients reach it (`http://IP:PORT`).
    pub(crate) api: String,
    /// The presets accepted.
    pub(crate) catalog: Catalog,
    /// Tokens and namespaces.
    pub(crate) tenancy: Tenancy,
    /// Request limits.
    pub(crate) limits: Limits,
    /// This node's metrics.
    pub(crate) metrics: Metrics,
    /// The store, once open (set once, after recovery).
    pub(crate) local: OnceLock<LocalNode>,
    /// Permits for requests in flight.
    pub(crate) inflight: Arc<Semaphore>,
    /// The cluster side, once started (never on a standalone node).
    pub(crate) cluster: OnceLock<Arc<Cluster>>,
    /// Whether the node was configured as a cluster member (then readiness waits for it).
    pub(crate) clustered: bool,
    /// The node's KV event log.
    pub(crate) events: Arc<EventLog>,
    /// Permits for open `GET /v1/events` streams (`events.max_sse_subscribers`).
    pub(crate) sse_slots: Arc<Semaphore>,
    /// `events.max_sse_subscribers`.
    pub(crate) sse_max: u32,
    /// The cost model of `POST /v1/route`.
    pub(crate) route: crate::config::RouteConfig,
}

/// The shared state of the router.
pub(crate) type AppState = Arc<App>;

impl App {
    /// The store, or 503 `not_ready` while it opens — and, on a cluster member, until its
    /// cluster side has started: before that a put would be acknowledged unreplicated and
    /// unregistered, and a lookup would answer from the empty local chunk index (found by the
    /// chaos harness: a linearizable lookup answered `null` right after a restart).
    pub(crate) fn local(&self) -> Result<&LocalNode, ApiError> {
        if self.clustered && self.cluster.get().is_none() {
            return Err(ApiError::NotReady);
        }
        self.local.get().ok_or(ApiError::NotReady)
    }
}
