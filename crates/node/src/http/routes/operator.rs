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

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde::Serialize;

use super::info::{cluster_body, cluster_info, ClusterResponse, Detail};
use crate::http::errors::ApiError;
use crate::http::AppState;

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
