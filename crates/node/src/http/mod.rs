//! The HTTP API (axum on hyper, HTTP/1.1) over the fabric core: routes, errors, tenancy,
//! metrics, and the bounded server loop.
//!
//! State is one [`App`] per node, shared by every request. Each handler checks and parses its
//! request (token, headers, body, query), calls one method of the node's
//! [`kvfabric_core::Fabric`], and maps its answer or [`kvfabric_core::FabricError`] back onto
//! HTTP; no handler orchestrates anything itself.

mod body;
pub(crate) mod engine_headers;
pub(crate) mod errors;
pub(crate) mod headers;
pub(crate) mod metrics;
pub(crate) mod operator;
pub(crate) mod routes;
pub(crate) mod serve;
pub(crate) mod tenancy;
mod track;

use std::sync::{Arc, OnceLock};

use kvfabric_core::events::EventLog;
use kvfabric_core::presets::Catalog;
use kvfabric_core::{Fabric, NodeId};
use tokio::sync::Semaphore;

use crate::config::Limits;
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
    /// The presets accepted (shared with the fabric).
    pub(crate) catalog: Arc<Catalog>,
    /// Tokens and namespaces.
    pub(crate) tenancy: Tenancy,
    /// Who may use the operator routes.
    pub(crate) operator: operator::Operator,
    /// Request limits.
    pub(crate) limits: Limits,
    /// This node's metrics.
    pub(crate) metrics: Metrics,
    /// The fabric, once the store is open and (on a cluster member) the cluster side has
    /// started.
    pub(crate) fabric: OnceLock<Arc<Fabric>>,
    /// Permits for requests in flight.
    pub(crate) inflight: Arc<Semaphore>,
    /// The node's KV event log.
    pub(crate) events: Arc<EventLog>,
    /// The cluster feed, when `events.cluster_feed` is on.
    pub(crate) feed: Option<Arc<kvfabric_core::events::cluster::ClusterFeed>>,
    /// Permits for open `GET /v1/events` streams (`events.max_sse_subscribers`).
    pub(crate) sse_slots: Arc<Semaphore>,
    /// `events.max_sse_subscribers`.
    pub(crate) sse_max: u32,
}

/// The shared state of the router.
pub(crate) type AppState = Arc<App>;

impl App {
    /// The fabric, or 503 `not_ready` while the store opens — and, on a cluster member, until
    /// its cluster side has started: before that a put would be acknowledged unreplicated and
    /// unregistered, and a lookup would answer from the empty local chunk index (found by the
    /// chaos harness: a linearizable lookup answered `null` right after a restart).
    pub(crate) fn fabric(&self) -> Result<&Fabric, ApiError> {
        self.fabric.get().map(|f| &**f).ok_or(ApiError::NotReady)
    }
}
