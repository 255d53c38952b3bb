//! `GET`, `HEAD` and `DELETE /v1/blocks/{id}`.
//!
//! Each calls one fabric method ([`kvfabric_core::Fabric::get_variant`], `head`, `delete`). On a
//! cluster node a `GET` that misses locally is served from another owner, named in
//! `kvfabric-source: n<owner>`; `HEAD` answers as `GET` would (an owner's probe answer when
//! this node holds none), moving nothing; both answer 503 `owners_unreachable` when owners
//! exist but none served, 404 only when none is known or all said they hold none. A
//! `DELETE` that drops the node's reference also releases its ownership record.
//!
//! A block is visible only in the namespace it was sealed in (and in shared namespaces to
//! every valid token). Input is checked before the lookup, and the lookup is by
//! `(namespace, id)`: another tenant's id and an absent id take the same path to the same
//! 404 with the same body.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use kvfabric_core::fabric::Served;
use kvfabric_core::{FabricError, NodeId};
use kvfabric_store::Tier;

use crate::http::errors::ApiError;
use crate::http::headers;
use crate::http::metrics::TierLabels;
use crate::http::AppState;

/// What `kvfabric-source` says of a block served from this node's own tiers.
const SOURCE_LOCAL: &str = "local";

fn block_headers(
    resp: &mut Response,
    tier: Tier,
    len: u64,
    model: Option<&str>,
    source: Option<NodeId>,
) {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let source = match source {
        None => HeaderValue::from_static(SOURCE_LOCAL),
        Some(n) => HeaderValue::from_str(&n.to_string()).expect("n<digits> is a valid header"),
    };
    h.insert(headers::SOURCE, source);
    h.insert(headers::TIER, HeaderValue::from_static(tier.name()));
    if let Some(m) = model.and_then(|m| HeaderValue::from_str(m).ok()) {
        h.insert(headers::MODEL_OUT, m);
    }
}

/// `GET /v1/blocks/{id}`: the payload, `k_rope` rotated to `?position=` if asked; `?variant=`
/// picks a later block under the id (after a dedup collision; see `Fabric::get_variant`).
pub(crate) async fn get_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let fabric = app.fabric()?;
    let read = app.tenancy.caller(&headers)?.read(&headers)?;
    let id = headers::block_id(uri.path())?;
    let q = headers::read_query(uri.query())?;
    let served = match fabric.get_variant(&read, id, q.variant, q.position).await {
        Ok(s) => s,
        Err(e) => {
            if matches!(e, FabricError::NotFound) {
                app.metrics.misses.inc();
            }
            return Err(ApiError::from_fabric(e));
        }
    };
    app.metrics
        .hits
        .get_or_create(&TierLabels {
            tier: served.tier.name(),
        })
        .inc();
    app.metrics.bytes_out.inc_by(served.payload.len() as u64);
    Ok(served_response(served, true))
}

/// A served block's response: its headers, and its payload as the body if `body`.
fn served_response(served: Served, body: bool) -> Response {
    let len = served.payload.len() as u64;
    let mut resp = match body {
        true => Body::from(served.payload).into_response(),
        false => StatusCode::OK.into_response(),
    };
    block_headers(
        &mut resp,
        served.tier,
        len,
        served.model.as_deref(),
        served.source,
    );
    resp
}

/// `HEAD /v1/blocks/{id}`: the status a `GET` would answer, with its length, tier and
/// `kvfabric-source` (`local`, or the owner that answered a probe); no bytes are read or
/// moved, except with `?position=`, which is answered by doing the GET (the rotation's
/// validity depends on the block's model) and sending no body.
pub(crate) async fn head_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let fabric = app.fabric()?;
    let read = app.tenancy.caller(&headers)?.read(&headers)?;
    let id = headers::block_id(uri.path())?;
    let q = headers::read_query(uri.query())?;
    if q.position.is_some() {
        // Whether the rotation is possible depends on the block's model (a hybrid layout has
        // no single `k_rope` to rotate), named in its header: answer as the GET would by
        // doing it, and send no body.
        let served = fabric
            .get_variant(&read, id, q.variant, q.position)
            .await
            .map_err(ApiError::from_fabric)?;
        return Ok(served_response(served, false));
    }
    let head = match q.variant {
        0 => fabric.head(&read, id).await,
        v => fabric.head_variant(&read, id, v),
    }
    .map_err(ApiError::from_fabric)?;
    let mut resp = StatusCode::OK.into_response();
    block_headers(&mut resp, head.tier, head.payload_len, None, head.source);
    Ok(resp)
}

/// `DELETE /v1/blocks/{id}`: drops this node's reference (204).
pub(crate) async fn delete_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let fabric = app.fabric()?;
    let caller = app.tenancy.caller(&headers)?;
    let own = caller.delete_keys(&headers)?;
    let read = caller.read(&headers).unwrap_or_default();
    let id = headers::block_id(uri.path())?;
    if uri.query().is_some_and(|q| !q.is_empty()) {
        return Err(ApiError::InvalidQuery("DELETE takes no parameters".into()));
    }
    fabric
        .delete(&own, &read, id)
        .await
        .map_err(ApiError::from_fabric)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
