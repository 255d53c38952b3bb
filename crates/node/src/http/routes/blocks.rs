//! `GET`, `HEAD` and `DELETE /v1/blocks/{id}`.
//!
//! On a cluster node a `GET` that misses locally fetches the block from its live owners
//! (`cluster::remote_get`), installs it, and serves it with `kvfabric-source: n<owner>`;
//! `HEAD` answers from this node's tiers only; a `DELETE` that drops the node's reference
//! also releases its ownership record in the directory.
//!
//! A block is visible only in the namespace it was sealed in (and in shared namespaces to
//! every valid token). Input is checked before the lookup, and the lookup is by
//! `(namespace, id)`: another tenant's id and an absent id take the same path to the same
//! 404 with the same body.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kvfabric_store::block::BlockHeader;
use kvfabric_store::rope::{rotate_block, Direction};
use kvfabric_store::{Tier, HEADER_LEN};

use crate::http::errors::ApiError;
use crate::http::headers;
use crate::http::metrics::TierLabels;
use crate::http::AppState;
use crate::local::Deleted;

/// What `kvfabric-source` says of a block served from this node's own tiers.
const SOURCE_LOCAL: &str = "local";

fn block_headers(
    resp: &mut Response,
    tier: Tier,
    len: u64,
    model: Option<&str>,
    source: Option<crate::ids::NodeId>,
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

/// `GET /v1/blocks/{id}`: the payload, `k_rope` rotated to `?position=` if asked.
pub(crate) async fn get_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let local = app.local()?;
    let read = app.tenancy.caller(&headers)?.read(&headers)?;
    let id = headers::block_id(uri.path())?;
    let position = headers::query_position(uri.query())?;
    let (block, tier, source) = match local.get(&read, &id).map_err(ApiError::from_local)? {
        Some((block, tier)) => (block, tier, None),
        None => {
            let remote = match app.cluster.get() {
                Some(c) => c.fetch_remote(&app, &read, id).await,
                None => None,
            };
            let Some(hit) = remote else {
                app.metrics.misses.inc();
                return Err(ApiError::NotFound);
            };
            (hit.block, hit.tier, Some(hit.source))
        }
    };
    app.metrics
        .hits
        .get_or_create(&TierLabels { tier: tier.name() })
        .inc();
    let header = BlockHeader::decode(block.bytes()).map_err(ApiError::from_store)?;
    let model = app.catalog.by_fingerprint(&header.fingerprint);
    let mut bytes = block.into_bytes();
    if let Some(p) = position {
        let model = model.ok_or(ApiError::UnknownGeometry)?;
        rotate_block(
            &model.layout,
            &mut bytes[HEADER_LEN..],
            p,
            Direction::Forward,
        )
        .map_err(ApiError::from_store)?;
    }
    let len = (bytes.len() - HEADER_LEN) as u64;
    app.metrics.bytes_out.inc_by(len);
    // The payload is served as a view into the verified buffer: no copy.
    let payload = Bytes::from(bytes).slice(HEADER_LEN..);
    let mut resp = Body::from(payload).into_response();
    block_headers(
        &mut resp,
        tier,
        len,
        model.map(|m| m.geometry.name.as_str()),
        source,
    );
    Ok(resp)
}

/// `HEAD /v1/blocks/{id}`: whether the caller can read it, its length and tier; no read.
pub(crate) async fn head_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let local = app.local()?;
    let read = app.tenancy.caller(&headers)?.read(&headers)?;
    let id = headers::block_id(uri.path())?;
    headers::query_position(uri.query())?;
    let Some((tier, len)) = local.head(&read, &id).map_err(ApiError::from_local)? else {
        return Err(ApiError::NotFound);
    };
    let mut resp = StatusCode::OK.into_response();
    block_headers(&mut resp, tier, len, None, None);
    Ok(resp)
}

/// `DELETE /v1/blocks/{id}`: drops this node's reference (204).
pub(crate) async fn delete_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let local = app.local()?;
    let caller = app.tenancy.caller(&headers)?;
    let write = caller.write(&headers)?;
    let read = caller.read(&headers).unwrap_or_default();
    let id = headers::block_id(uri.path())?;
    if uri.query().is_some_and(|q| !q.is_empty()) {
        return Err(ApiError::InvalidQuery("DELETE takes no parameters".into()));
    }
    let held = local.head(&[write], &id).map_err(ApiError::from_local)?;
    match local
        .delete(&write, &read, &id)
        .map_err(ApiError::from_local)?
    {
        Deleted::Released => {
            let batcher = app.cluster.get().and_then(|c| c.incarnation.batcher());
            if let (Some(b), Some((tier, _))) = (batcher, held) {
                // The reference is gone either way; a lost release is purged with the lease.
                if let Err(e) = b.release(id, tier).await {
                    tracing::warn!(block = %id, error = %e, "releasing ownership failed");
                }
            }
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Deleted::Forbidden => Err(ApiError::NamespaceForbidden("delete from")),
        Deleted::NotFound => Err(ApiError::NotFound),
    }
}
