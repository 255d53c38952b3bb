//! Live membership, for the operator (`[operator] token`): `POST /v1/operator/members` adds
//! a member, `DELETE /v1/operator/members/{id}` removes one. Each answers once the change is
//! complete (a bounded wait: catch-up, a drain), with the voters and learners after it; a
//! change that did not complete answers 503 `membership_incomplete` (what was done stays;
//! asking again, of any member, resumes), one not allowed 409 `membership_refused`.
//!
//! `POST` body: `{"id": 4, "api": "http://IP:PORT", "transport": "IP:PORT", "raft":
//! "IP:PORT"}` — the new member's `[[cluster.members]]` entry (its node must be running with a
//! config that names the others and itself, and a certificate `node4` of the cluster's CA).
//! Answer: `{"node": "n4", "voters": [...], "learners": [...], "drained_copies": 0}`.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::http::body::read_bounded;
use crate::http::errors::ApiError;
use crate::http::AppState;
use kvfabric_core::cluster::reconfig::Reconfigured;
use kvfabric_core::config::Member;
use kvfabric_core::NodeId;

/// Largest body of an add.
const ADD_BODY_BYTES_MAX: u64 = 4096;
/// Largest node id (as the config allows).
const NODE_ID_MAX: u64 = 1 << 32;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRequest {
    id: u64,
    api: String,
    transport: SocketAddr,
    raft: SocketAddr,
}

#[derive(Serialize)]
struct Changed {
    node: String,
    voters: Vec<String>,
    learners: Vec<String>,
    drained_copies: u64,
}

fn changed(r: Reconfigured) -> Response {
    let names = |v: Vec<NodeId>| v.into_iter().map(|n| n.to_string()).collect();
    super::json(&Changed {
        node: r.node.to_string(),
        voters: names(r.voters),
        learners: names(r.learners),
        drained_copies: r.drained_copies,
    })
}

fn node_id(s: &str) -> Result<NodeId, ApiError> {
    s.strip_prefix('n')
        .unwrap_or(s)
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=NODE_ID_MAX).contains(n))
        .map(NodeId)
        .ok_or_else(|| {
            ApiError::InvalidQuery(format!(
                "member id: expected n1 to n{NODE_ID_MAX} (or the number), found {:?}",
                s.chars().take(40).collect::<String>()
            ))
        })
}

/// `POST /v1/operator/members`.
pub(crate) async fn add(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    app.operator.authorize(&headers, &app.tenancy)?;
    let fabric = app.fabric()?;
    let deadline = Instant::now() + app.limits.body_read_timeout;
    let timeout_ms = app.limits.body_read_timeout.as_millis();
    let raw = read_bounded(body, ADD_BODY_BYTES_MAX, deadline, timeout_ms).await?;
    let req: AddRequest =
        serde_json::from_slice(&raw).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let id = node_id(&req.id.to_string()).map_err(|_| {
        ApiError::InvalidJson(format!("id: expected 1 to {NODE_ID_MAX}, found {}", req.id))
    })?;
    if !req.api.starts_with("http://") || req.api.len() > 256 {
        return Err(ApiError::InvalidJson(format!(
            "api: expected http://IP:PORT, found {:?}",
            req.api.chars().take(80).collect::<String>()
        )));
    }
    let m = Member {
        id,
        api: req.api,
        transport: req.transport,
        raft: req.raft,
    };
    let r = fabric.add_member(m).await.map_err(ApiError::from_fabric)?;
    Ok(changed(r))
}

/// `DELETE /v1/operator/members/{id}`.
pub(crate) async fn remove(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.operator.authorize(&headers, &app.tenancy)?;
    let fabric = app.fabric()?;
    let id = node_id(&id)?;
    let r = fabric
        .remove_member(id)
        .await
        .map_err(ApiError::from_fabric)?;
    Ok(changed(r))
}

#[cfg(test)]
mod tests {
    use super::node_id;

    #[test]
    fn member_ids_are_n_or_a_number_within_bounds() {
        assert_eq!(node_id("n4").unwrap().0, 4);
        assert_eq!(node_id("7").unwrap().0, 7);
        for bad in ["n0", "0", "x", "n-1", "n99999999999", ""] {
            assert!(node_id(bad).is_err(), "{bad}");
        }
    }
}
