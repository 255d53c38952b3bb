//! The informational routes: `GET /v1/models`, `GET /v1/cluster`, `GET /metrics`,
//! `GET /healthz`, `GET /readyz`.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::http::errors::ApiError;
use crate::http::AppState;
use crate::presets::ModelInfo;

/// The Raft term a node reports before it has a directory.
const TERM_STANDALONE: u64 = 0;
/// The role of a node that is the whole cluster.
const ROLE_STANDALONE: &str = "standalone";

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
    used: u64,
    blocks: u64,
}

#[derive(Serialize)]
struct Member {
    id: String,
    api: String,
    role: &'static str,
    tiers: Vec<TierView>,
    healthy: bool,
}

/// One measured node-to-node link.
#[derive(Serialize)]
struct LinkOut {
    from: String,
    to: String,
    gbps: f64,
    samples: u64,
}

#[derive(Serialize)]
struct ClusterResponse {
    members: Vec<Member>,
    /// `null` while no leader is known.
    leader: Option<String>,
    term: u64,
    /// Measured bandwidths (empty on a standalone node and before any fetch).
    bandwidth: Vec<LinkOut>,
}

/// `GET /v1/cluster`: on a cluster node, every configured member with its Raft role, whether
/// its lease is current and its tiers (asked of each live member, bounded; none for a member
/// that does not answer), the leader, the term and the measured node-to-node bandwidths
/// (`bandwidth`: `from`, `to`, `gbps`, `samples`); on a standalone node, this node as the
/// only member, `standalone`, its own leader at term 0.
pub(crate) async fn cluster(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.tenancy.caller(&headers)?;
    let snapshot = match app.local.get() {
        Some(l) => Some(l.snapshot().map_err(ApiError::from_local)?),
        None => None,
    };
    let mut tiers = tier_views(snapshot.as_ref());
    if let Some(c) = app.cluster.get() {
        let view = c.view();
        let mut peers = c.peer_tiers().await;
        let members = view
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id.to_string(),
                api: m.api,
                role: m.role,
                tiers: if m.id == app.node_id {
                    std::mem::take(&mut tiers)
                } else {
                    peers
                        .remove(&m.id)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|t| TierView {
                            tier: t.tier,
                            capacity: t.capacity,
                            used: t.used,
                            blocks: t.blocks,
                        })
                        .collect()
                },
                healthy: m.healthy,
            })
            .collect();
        let bandwidth = c
            .bandwidth
            .links()
            .into_iter()
            .map(|l| LinkOut {
                from: l.from.to_string(),
                to: l.to.to_string(),
                gbps: l.gbps,
                samples: l.samples,
            })
            .collect();
        return Ok(super::json(&ClusterResponse {
            members,
            leader: view.leader.map(|l| l.to_string()),
            term: view.term,
            bandwidth,
        }));
    }
    let me = app.node_id.to_string();
    Ok(super::json(&ClusterResponse {
        members: vec![Member {
            id: me.clone(),
            api: app.api.clone(),
            role: ROLE_STANDALONE,
            tiers,
            healthy: snapshot.is_some(),
        }],
        leader: Some(me),
        term: TERM_STANDALONE,
        bandwidth: Vec::new(),
    }))
}

fn tier_views(snapshot: Option<&crate::local::Snapshot>) -> Vec<TierView> {
    snapshot
        .iter()
        .flat_map(|s| &s.usage)
        .map(|u| TierView {
            tier: u.tier.name().to_owned(),
            capacity: u.capacity.0,
            used: u.used.0,
            blocks: u.blocks,
        })
        .collect()
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(app): State<AppState>) -> Result<Response, ApiError> {
    let snapshot = match app.local.get() {
        Some(l) => Some(l.snapshot().map_err(ApiError::from_local)?),
        None => None,
    };
    if let Some(c) = app.cluster.get() {
        app.metrics.set_cluster(&c.metrics());
        app.metrics.set_links(&c.bandwidth.links());
    }
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
    app.local()?;
    if app.clustered {
        let cluster = app
            .cluster
            .get()
            .ok_or(ApiError::ClusterNotReady("the cluster side is starting"))?;
        cluster
            .ready()
            .map_err(|r| ApiError::ClusterNotReady(r.reason()))?;
    }
    Ok(super::json(&serde_json::json!({ "ready": true })))
}
