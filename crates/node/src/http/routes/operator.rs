//! The operator's feeds (`[operator] token`, see `http::operator`): what the dashboard
//! polls and streams.
//!
//! - `GET /v1/operator/overview`: `GET /v1/cluster`'s body with each member's counters
//!   (`stats`: reads by tier, reads not found, puts by dedup outcome, verification failures on
//!   tier reads and on receipt, dedup collisions, quarantined entries, fetches, transport
//!   bytes, held blocks; cumulative since the member started, absent for a member that did not
//!   answer in time), this node's id (`node`) and its clock (`now_ms`, for rates).
//! - `GET /v1/operator/events`: `GET /v1/events` over every namespace of the node (the same
//!   SSE messages, `?since=` and `Last-Event-ID`, subscriber bound and replay gaps).
//! - `GET /v1/operator/directory`: this member's directory replica in 32 bytes, with the last
//!   log entry it applied (`applied_index`, `applied`); members that report one index must
//!   report one digest, or their replicas have diverged (the chaos harness checks this).

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde::Serialize;

use super::info::{cluster_body, cluster_info, ClusterResponse, Detail};
use crate::http::errors::ApiError;
use crate::http::AppState;

#[derive(Serialize)]
struct DirectoryDigest {
    node: String,
    /// The last log entry applied (`T<term>-N<leader>-<index>`), null before the first.
    applied: Option<String>,
    applied_index: Option<u64>,
    /// blake3 of the replica's state, hex.
    digest: String,
}

#[derive(Serialize)]
struct Overview {
    node: String,
    now_ms: u64,
    #[serde(flatten)]
    cluster: ClusterResponse,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `GET /v1/operator/overview`.
pub(crate) async fn overview(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.operator.authorize(&headers, &app.tenancy)?;
    let info = cluster_info(&app).await?;
    Ok(super::json(&Overview {
        node: app.node_id.to_string(),
        now_ms: now_ms(),
        cluster: cluster_body(info, Detail::Operator),
    }))
}

/// `GET /v1/operator/events`.
pub(crate) async fn events(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    app.operator.authorize(&headers, &app.tenancy)?;
    super::events::stream_events(&app, &headers, &uri, app.tenancy.keys(), None)
}

/// `GET /v1/operator/directory`.
pub(crate) async fn directory(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.operator.authorize(&headers, &app.tenancy)?;
    let state = app.clone();
    let digest = tokio::task::spawn_blocking(move || {
        state
            .fabric()?
            .directory_digest()
            .map_err(ApiError::from_fabric)
    })
    .await
    .map_err(|_| ApiError::Internal)??;
    Ok(super::json(&DirectoryDigest {
        node: app.node_id.to_string(),
        applied: digest.applied.map(|id| id.to_string()),
        applied_index: digest.applied.map(|id| id.index),
        digest: digest.digest.to_hex().to_string(),
    }))
}
