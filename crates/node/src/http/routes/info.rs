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
    tier: &'static str,
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

#[derive(Serialize)]
struct ClusterResponse {
    members: Vec<Member>,
    leader: String,
    term: u64,
}

/// `GET /v1/cluster`: this node as the only member, `standalone`, its own leader at term 0.
pub(crate) async fn cluster(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.tenancy.caller(&headers)?;
    let snapshot = match app.local.get() {
        Some(l) => Some(l.snapshot().map_err(ApiError::from_local)?),
        None => None,
    };
    let tiers = snapshot
        .iter()
        .flat_map(|s| &s.usage)
        .map(|u| TierView {
            tier: u.tier.name(),
            capacity: u.capacity.0,
            used: u.used.0,
            blocks: u.blocks,
        })
        .collect();
    let me = app.node_id.to_string();
    Ok(super::json(&ClusterResponse {
        members: vec![Member {
            id: me.clone(),
            api: app.api.clone(),
            role: ROLE_STANDALONE,
            tiers,
            healthy: snapshot.is_some(),
        }],
        leader: me,
        term: TERM_STANDALONE,
    }))
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(app): State<AppState>) -> Result<Response, ApiError> {
    let snapshot = match app.local.get() {
        Some(l) => Some(l.snapshot().map_err(ApiError::from_local)?),
        None => None,
    };
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

/// `GET /readyz`: the store is open (later also: joined, directory caught up).
pub(crate) async fn readyz(State(app): State<AppState>) -> Result<Response, ApiError> {
    app.local()?;
    Ok(super::json(&serde_json::json!({ "ready": true })))
}
