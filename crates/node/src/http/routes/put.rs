//! `PUT /v1/blocks`: check the request, then hand its body to [`Fabric::put`], which
//! receives it straight into a store reservation, seals, holds, registers and replicates it.
//!
//! Checks run cheapest first and before any byte of the body is read: the token, the headers,
//! the model, the token count, the declared length. A body refused after that is drained (within
//! the body limit) so the client gets the answer rather than a reset connection.
//!
//! A block may be named by two chunk keys: `kvfabric-chunk-key` (usually the prefix-chained
//! key) and `kvfabric-chunk-key-independent` (the position-independent one); each is recorded
//! so that lookups and routes find the block by either.
//!
//! A put from an engine may carry the engine's identity of the block (`kvfabric-engine-*`,
//! [`engine_headers`]): kept with the block, published in its events.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kvfabric_core::fabric::{PutBody, PutFailure, PutRequest};
use kvfabric_core::presets::Model;
use kvfabric_core::{ChunkKey, Fabric, FabricError};
use kvfabric_store::{NamespaceKey, PutForm, StoreError};
use serde::Serialize;
use tokio::time::Instant;

use crate::http::body::{drain, next_piece};
use crate::http::errors::ApiError;
use crate::http::metrics::DedupLabels;
use crate::http::{engine_headers, headers};
use crate::http::{App, AppState};

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
    /// The nodes that acknowledged holding one (`n<id>`, this node first).
    holders: Vec<String>,
    /// Which of this node's blocks under the id it is, when not the first (a dedup
    /// collision: read it with `?variant=`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    variant: Option<u32>,
}

/// What the headers decided, before any byte of the body is read.
struct Plan<'a> {
    ns: NamespaceKey,
    model: &'a Model,
    form: PutForm,
    /// The chunk keys naming the block: `kvfabric-chunk-key`, then
    /// `kvfabric-chunk-key-independent` (each optional).
    chunk_keys: Vec<ChunkKey>,
    /// The engine's identity of the block (`kvfabric-engine-*`), for the events.
    engine: Option<std::sync::Arc<kvfabric_core::events::EngineBlock>>,
}

/// The request body, read piece by piece within the body deadline.
struct HttpBody {
    body: Body,
    deadline: Instant,
    timeout_ms: u128,
}

impl PutBody for HttpBody {
    type Error = ApiError;

    async fn next_piece(&mut self) -> Result<Option<bytes::Bytes>, ApiError> {
        next_piece(&mut self.body, self.deadline, self.timeout_ms).await
    }
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
    let (fabric, plan) = match plan(&app, &headers) {
        Ok(p) => p,
        // Read what was sent (within the body limit) so the client gets this answer instead
        // of a reset connection; a body declared past the limit is not read at all.
        Err(e @ ApiError::BodyTooLarge(_)) => return Err(e),
        Err(e) => {
            let _ = drain(body, 0, max, deadline, timeout_ms).await;
            return Err(e);
        }
    };
    let expected = plan.model.layout.payload_len;
    if let Some(declared) = headers::content_length(&headers)? {
        if declared != expected {
            let found = drain(body, 0, max, deadline, timeout_ms).await?;
            return Err(ApiError::PayloadLength { expected, found });
        }
    }
    let mut body = HttpBody {
        body,
        deadline,
        timeout_ms,
    };
    let req = PutRequest {
        ns: plan.ns,
        model: plan.model,
        form: plan.form,
        chunk_keys: plan.chunk_keys,
        engine: plan.engine,
    };
    let done = match fabric.put(req, &mut body).await {
        Ok(d) => d,
        Err(PutFailure::Body(e)) => return Err(e),
        Err(PutFailure::Fabric(FabricError::PayloadLength { expected, found })) => {
            let found = drain(body.body, found, max, deadline, timeout_ms).await?;
            return Err(ApiError::PayloadLength { expected, found });
        }
        Err(PutFailure::Fabric(e)) => {
            let refused = ApiError::from_fabric(e);
            if matches!(refused, ApiError::StoreFull(_)) {
                let _ = drain(body.body, 0, max, deadline, timeout_ms).await;
            }
            return Err(refused);
        }
    };
    app.metrics.bytes_in.inc_by(expected);
    app.metrics
        .puts
        .get_or_create(&DedupLabels {
            dedup: done.dedup.name(),
        })
        .inc();
    let resp = PutResponse {
        block: done.id.to_hex(),
        dedup: done.dedup.name(),
        bytes: done.bytes.0,
        replicas: done.replicas,
        holders: done.holders.iter().map(|n| n.to_string()).collect(),
        variant: (done.variant > 0).then_some(done.variant),
    };
    Ok((StatusCode::CREATED, super::json(&resp)).into_response())
}

/// Every check that needs no body: the node is ready, the token, the headers, the model, the
/// token count, the declared length against the body limit.
fn plan<'a>(app: &'a App, headers: &HeaderMap) -> Result<(&'a Fabric, Plan<'a>), ApiError> {
    let fabric = app.fabric()?;
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
        Some(position) => {
            // A model whose RoPE dims cannot be un-rotated is refused before its body is read.
            model
                .layout
                .check_rotatable()
                .map_err(ApiError::from_store)?;
            PutForm::Rotated { position }
        }
        None => PutForm::Canonical,
    };
    let chunk_keys: Vec<ChunkKey> = [
        headers::chunk_key(headers)?,
        headers::chunk_key_independent(headers)?,
    ]
    .into_iter()
    .flatten()
    .collect();
    let engine = engine_headers::engine_block(headers, g)?;
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
    Ok((
        fabric,
        Plan {
            ns,
            model,
            form,
            chunk_keys,
            engine,
        },
    ))
}
