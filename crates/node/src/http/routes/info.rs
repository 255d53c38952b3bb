//! The informational routes: `GET /v1/models`, `GET /v1/cluster`, `GET /metrics`,
//! `GET /healthz`, `GET /readyz`.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::http::errors::ApiError;
use crate::http::AppState;
use kvfabric_core::cluster::stats::MemberStats;
use kvfabric_core::fabric::{self, ClusterInfo};
use kvfabric_core::presets::ModelInfo;

#[derive(Serialize)]
struct ModelsResponse {
    models: Vec<ModelInfo>,
}

/// `GET /v1/models`.
pub(crate) async fn models(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.tenancy.caller(&headers)?;
    Ok(super::json(&ModelsResponse {
        models: app.catalog.infos(),
    }))
}

#[derive(Serialize)]
struct TierView {
    tier: String,
    capacity: u64,
    /// What every tenant's blocks fill together: not in a tenant's view.
    #[serde(skip_serializing_if = "Option::is_none")]
    used: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blocks: Option<u64>,
}

/// How much of the cluster a caller of `GET /v1/cluster` (or the overview) sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Detail {
    /// A tenant of a node with tenants: members, roles, health and tier capacities, nothing
    /// that other tenants' blocks or fetches move (no `used`, `blocks`, `bandwidth`).
    Tenant,
    /// An open node's caller, or the operator: everything but the counters.
    Full,
    /// The operator's overview: everything and each member's counters.
    Operator,
}

#[derive(Serialize)]
struct Member {
    id: String,
    api: String,
    role: &'static str,
    tiers: Vec<TierView>,
    healthy: bool,
    /// The member's counters: the operator's view only.
    #[serde(skip_serializing_if = "Option::is_none")]
    stats: Option<MemberStats>,
}

/// One measured node-to-node link.
#[derive(Serialize)]
struct LinkOut {
    from: String,
    to: String,
    gbps: f64,
    samples: u64,
}

/// The body of `GET /v1/cluster` (and, with counters, of the operator's overview).
#[derive(Serialize)]
pub(super) struct ClusterResponse {
    members: Vec<Member>,
    /// `null` while no leader is known.
    leader: Option<String>,
    term: u64,
    /// Measured bandwidths (empty on a standalone node and before any fetch).
    bandwidth: Vec<LinkOut>,
}

/// This node's view of the cluster: from the fabric, or (store still opening) itself alone.
pub(super) async fn cluster_info(app: &AppState) -> Result<ClusterInfo, ApiError> {
    match app.fabric.get() {
        Some(f) => f.cluster_info().await.map_err(ApiError::from_fabric),
        None => Ok(fabric::opening(app.node_id, &app.api)),
    }
}

/// The response body of `info` as `detail` shows it.
pub(super) fn cluster_body(info: ClusterInfo, detail: Detail) -> ClusterResponse {
    let occupancy = detail != Detail::Tenant;
    ClusterResponse {
        members: info
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id.to_string(),
                api: m.api,
                role: m.role,
                tiers: m
                    .tiers
                    .into_iter()
                    .map(|t| TierView {
                        tier: t.tier,
                        capacity: t.capacity,
                        used: occupancy.then_some(t.used),
                        blocks: occupancy.then_some(t.blocks),
                    })
                    .collect(),
                healthy: m.healthy,
                stats: m.stats.filter(|_| detail == Detail::Operator),
            })
            .collect(),
        leader: info.leader.map(|l| l.to_string()),
        term: info.term,
        bandwidth: info
            .links
            .into_iter()
            .filter(|_| occupancy)
            .map(|l| LinkOut {
                from: l.from.to_string(),
                to: l.to.to_string(),
                gbps: l.gbps,
                samples: l.samples,
            })
            .collect(),
    }
}

/// `GET /v1/cluster`: on a cluster node, every configured member with its Raft role, whether
/// its lease is current and its tiers (asked of each live member, bounded; none for a member
/// that does not answer), the leader, the term and the measured node-to-node bandwidths
/// (`bandwidth`: `from`, `to`, `gbps`, `samples`); on a standalone node, this node as the
/// only member, `standalone`, its own leader at term 0. On a node with tenants a tenant's
/// token sees no tier's `used` or `blocks` and no `bandwidth` (other tenants' blocks and
/// fetches move them); the operator's token sees everything.
pub(crate) async fn cluster(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let operator = app.operator.is_bearer(&headers);
    if !operator {
        app.tenancy.caller(&headers)?;
    }
    let detail = if operator || app.tenancy.is_open() {
        Detail::Full
    } else {
        Detail::Tenant
    };
    let info = cluster_info(&app).await?;
    Ok(super::json(&cluster_body(info, detail)))
}

/// `GET /metrics`: on a node with tenants, for the operator's token only (every series counts
/// every tenant's blocks and requests); on an open node, for anyone.
pub(crate) async fn metrics(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !app.tenancy.is_open() {
        app.operator.authorize(&headers, &app.tenancy)?;
    }
    let snapshot = match app.fabric.get() {
        Some(f) => Some(f.snapshot().map_err(ApiError::from_fabric)?),
        None => None,
    };
    if let Some(f) = app.fabric.get() {
        if let Some(m) = f.cluster_metrics() {
            app.metrics.set_cluster(&m);
        }
        app.metrics.set_links(&f.links());
        let (live, bytes) = f.arena_usage().map_err(ApiError::from_fabric)?;
        app.metrics.set_arenas(live as u64, bytes.0);
    }
    app.metrics.set_runtime();
    let text = app.metrics.encode(snapshot.as_ref());
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// `GET /healthz`: the process is up and serving.
pub(crate) async fn healthz() -> Response {
    (
        StatusCode::OK,
        super::json(&serde_json::json!({ "status": "ok" })),
    )
        .into_response()
}

/// `GET /readyz`: the store is open and, on a cluster node, the node has joined the
/// directory, a leader is known and this replica has applied its own join.
pub(crate) async fn readyz(State(app): State<AppState>) -> Result<Response, ApiError> {
    app.fabric()?
        .ready()
        .map_err(|r| ApiError::ClusterNotReady(r.reason()))?;
    Ok(super::json(&serde_json::json!({ "ready": true })))
}
