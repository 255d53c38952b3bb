//! `PUT /v1/blocks`: receive a payload straight into a store reservation, seal it, hold it.
//!
//! Checks run cheapest first and before any byte of the body is read: the token, the headers,
//! the model, the token count, the declared length. The body then streams into the
//! reservation piece by piece (the store lock is taken per piece, never across a read); any
//! refusal after that cancels the reservation (see [`PutSession`]).
//!
//! A block may be named by two chunk keys: `kvfabric-chunk-key` (usually the prefix-chained
//! key) and `kvfabric-chunk-key-independent` (the position-independent one); each is recorded
//! (in the local chunk index, and as a directory chunk record on a cluster node) so that
//! lookups and routes find the block by either.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kvfabric_store::{NamespaceKey, PutForm, StoreError};
use serde::Serialize;
use tokio::time::Instant;

use crate::http::body::{drain, next_piece};
use crate::http::errors::ApiError;
use crate::http::headers;
use crate::http::metrics::DedupLabels;
use crate::http::{App, AppState};
use crate::ids::ChunkKey;
use crate::local::{PutError, PutSession};
use crate::presets::Model;

/// Replicas acknowledged on a standalone node.
const REPLICAS_LOCAL: u32 = 1;

/// The 201 body.
#[derive(Serialize)]
struct PutResponse {
    /// Content id (hex).
    block: String,
    /// `new`, `shared` or `collision`.
    dedup: &'static str,
    /// Stored bytes of the block (its 64-byte header and the payload).
    bytes: u64,
    /// Nodes holding a verified copy.
    replicas: u32,
}

/// What the headers decided, before any byte of the body is read.
struct Plan<'a> {
    ns: NamespaceKey,
    model: &'a Model,
    form: PutForm,
    /// The chunk keys naming the block: `kvfabric-chunk-key`, then
    /// `kvfabric-chunk-key-independent` (each optional).
    chunk_keys: Vec<ChunkKey>,
}

/// The handler.
pub(crate) async fn put_block(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let max = app.limits.max_body_bytes;
    let timeout_ms = app.limits.body_read_timeout.as_millis();
    let deadline = Instant::now() + app.limits.body_read_timeout;
    let plan = match plan(&app, &headers) {
        Ok(p) => p,
        // Read what was sent (within the body limit) so the client gets this answer instead
        // of a reset connection; a body declared past the limit is not read at all.
        Err(e @ ApiError::BodyTooLarge(_)) => return Err(e),
        Err(e) => {
            let _ = drain(body, 0, max, deadline, timeout_ms).await;
            return Err(e);
        }
    };
    let local = app.local()?;
    let g = &plan.model.geometry;
    let expected = plan.model.layout.payload_len;
    if let Some(declared) = headers::content_length(&headers)? {
        if declared != expected {
            let found = drain(body, 0, max, deadline, timeout_ms).await?;
            return Err(ApiError::PayloadLength { expected, found });
        }
    }

    let mut session = match PutSession::begin(local, g, expected) {
        Ok(s) => s,
        Err(e) => {
            let _ = drain(body, 0, max, deadline, timeout_ms).await;
            return Err(ApiError::from_local(e));
        }
    };
    let mut body = body;
    while let Some(piece) = next_piece(&mut body, deadline, timeout_ms).await? {
        match session.write(&piece) {
            Ok(()) => {}
            Err(PutError::Length { .. }) => {
                let already = session.written() + piece.len() as u64;
                drop(session); // cancels the reservation before the drain
                let found = drain(body, already, max, deadline, timeout_ms).await?;
                return Err(ApiError::PayloadLength { expected, found });
            }
            Err(PutError::Local(e)) => return Err(ApiError::from_local(e)),
        }
    }
    let sealed = match session.seal(plan.ns, g, plan.form, &plan.chunk_keys) {
        Ok(s) => s,
        Err(PutError::Length { expected, found }) => {
            return Err(ApiError::PayloadLength { expected, found })
        }
        Err(PutError::Local(e)) => return Err(ApiError::from_local(e)),
    };
    app.metrics.bytes_in.inc_by(expected);
    app.metrics
        .puts
        .get_or_create(&DedupLabels {
            dedup: sealed.dedup.name(),
        })
        .inc();
    tracing::debug!(block = %sealed.id, model = %g.name, dedup = sealed.dedup.name(), "sealed");
    let replicas = match app.cluster.get() {
        None => REPLICAS_LOCAL,
        Some(cluster) => {
            let batcher = cluster.incarnation.batcher().ok_or_else(|| {
                ApiError::DirectoryUnavailable("this node has not joined the directory yet".into())
            })?;
            // One claim per chunk key (the first carries no key when none was sent), both in
            // flight together so that they can share a batch.
            let chunk = |i: usize| {
                plan.chunk_keys
                    .get(i)
                    .map(|k| crate::cluster::directory_chunk_key(&plan.ns, *k))
            };
            let second = async {
                match chunk(1) {
                    Some(c) => batcher
                        .claim(sealed.id, sealed.tier, Some(c))
                        .await
                        .map(|_| ()),
                    None => Ok(()),
                }
            };
            let (first, second) =
                tokio::join!(batcher.claim(sealed.id, sealed.tier, chunk(0)), second);
            first
                .map(|_| ())
                .and(second)
                .map_err(|e| ApiError::DirectoryUnavailable(e.to_string()))?;
            let r = cluster.replicate(plan.ns, sealed.id).await;
            if r.have < r.want {
                return Err(ApiError::ReplicationIncomplete {
                    block: sealed.id.to_hex(),
                    have: r.have,
                    want: r.want,
                });
            }
            r.have
        }
    };
    let resp = PutResponse {
        block: sealed.id.to_hex(),
        dedup: sealed.dedup.name(),
        bytes: sealed.bytes.0,
        replicas,
    };
    Ok((StatusCode::CREATED, super::json(&resp)).into_response())
}

/// Every check that needs no body: the node is ready, the token, the headers, the model, the
/// token count, the declared length against the body limit.
fn plan<'a>(app: &'a App, headers: &HeaderMap) -> Result<Plan<'a>, ApiError> {
    app.local()?;
    let ns = app.tenancy.caller(headers)?.write(headers)?;
    let model = app
        .catalog
        .lookup(headers::required(headers, headers::MODEL)?)
        .map_err(ApiError::from_store)?;
    let g = &model.geometry;
    if !g.is_storable() {
        return Err(ApiError::from_store(StoreError::NotStorable {
            name: g.name.clone(),
            kind: g.kind().name(),
        }));
    }
    let tokens = headers::required_u64(headers, headers::TOKENS)?;
    if tokens != u64::from(model.layout.block_tokens) {
        return Err(ApiError::TokenCount {
            expected: model.layout.block_tokens,
            found: tokens,
        });
    }
    let form = match headers::position(headers)? {
        Some(position) => PutForm::Rotated { position },
        None => PutForm::Canonical,
    };
    let chunk_keys: Vec<ChunkKey> = [
        headers::chunk_key(headers)?,
        headers::chunk_key_independent(headers)?,
    ]
    .into_iter()
    .flatten()
    .collect();
    let expected = model.layout.payload_len;
    let max = app.limits.max_body_bytes;
    if expected > max {
        return Err(ApiError::BodyTooLarge(format!(
            "a `{}` block is {expected} bytes; this node accepts at most {max}",
            g.name
        )));
    }
    if let Some(declared) = headers::content_length(headers)? {
        if declared > max {
            return Err(ApiError::BodyTooLarge(format!(
                "expected at most {max} bytes, found {declared}"
            )));
        }
    }
    Ok(Plan {
        ns,
        model,
        form,
        chunk_keys,
    })
}
