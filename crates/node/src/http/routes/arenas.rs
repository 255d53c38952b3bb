//! The per-request arenas of hybrid (DeepSeek-V4) models: sliding-window rows and the
//! uncompressed tail of each compressed layer, over [`kvfabric_core::Fabric`]'s arena methods.
//!
//! | method, path | request | success |
//! |---|---|---|
//! | `POST /v1/arenas` | `kvfabric-model` (a hybrid preset) | 201 the arena's status |
//! | `GET /v1/arenas/{id}` | | 200 its status |
//! | `POST /v1/arenas/{id}/tokens` | body: one token's rows of every layer | 200 `{"tokens", "complete"}` |
//! | `POST /v1/arenas/{id}/layers/{layer}/rows` | body: one row of that layer | 200 the layer's status |
//! | `GET /v1/arenas/{id}/layers/{layer}/window` | | 200 the window's rows, oldest first |
//! | `POST /v1/arenas/{id}/layers/{layer}/drain` | | 200 the completed group's rows |
//! | `DELETE /v1/arenas/{id}` | | 204 |
//!
//! Row bodies are raw bytes: a row is `rope_dim` RoPE dims in the RoPE dtype then the content
//! dims in the content dtype, as the engine has it (the arena never rotates or canonicalises);
//! a token's rows are every layer's row in layer order. Rows answers carry `kvfabric-rows`.
//! The arena belongs to the namespace it was created in (the caller's write namespace);
//! another tenant's arena is the same 404 as one never created. Each handler checks its input,
//! calls one fabric method and maps its answer.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kvfabric_core::fabric::{ArenaHandle, ArenaLayer, ArenaRows, ArenaStatus};
use kvfabric_core::Fabric;
use kvfabric_store::NamespaceKey;
use serde::Serialize;
use tokio::time::Instant;

use crate::http::body::read_bounded;
use crate::http::errors::ApiError;
use crate::http::headers;
use crate::http::{App, AppState};

/// How many rows a rows answer holds.
const ROWS: &str = "kvfabric-rows";

/// One layer of the status body.
#[derive(Serialize)]
struct LayerBody {
    layer: u32,
    scheme: &'static str,
    appended: u64,
    window_rows: u32,
    group_rows: u32,
    group_needed: u32,
}

/// The status body.
#[derive(Serialize)]
struct StatusBody {
    arena: String,
    model: String,
    bytes: u64,
    row_bytes: usize,
    token_bytes: usize,
    window_rows: u32,
    layers: Vec<LayerBody>,
}

fn layer_body(index: u32, l: &ArenaLayer) -> LayerBody {
    LayerBody {
        layer: index,
        scheme: l.scheme.name(),
        appended: l.appended,
        window_rows: l.window_rows,
        group_rows: l.group_rows,
        group_needed: l.group_needed,
    }
}

fn status_body(s: &ArenaStatus) -> StatusBody {
    StatusBody {
        arena: s.handle.to_string(),
        model: s.model.clone(),
        bytes: s.bytes.0,
        row_bytes: s.row_bytes,
        token_bytes: s.row_bytes * s.layers.len(),
        window_rows: s.window,
        layers: (0u32..)
            .zip(&s.layers)
            .map(|(i, l)| layer_body(i, l))
            .collect(),
    }
}

/// The fabric and the namespaces the caller may read.
fn reader<'a>(
    app: &'a App,
    headers: &HeaderMap,
) -> Result<(&'a Fabric, Vec<NamespaceKey>), ApiError> {
    let fabric = app.fabric()?;
    Ok((fabric, app.tenancy.caller(headers)?.read(headers)?))
}

/// The fabric, the namespace the caller writes and those it may read (which decide 403
/// against 404 for an arena it may not change).
fn writer<'a>(
    app: &'a App,
    headers: &HeaderMap,
) -> Result<(&'a Fabric, NamespaceKey, Vec<NamespaceKey>), ApiError> {
    let fabric = app.fabric()?;
    let caller = app.tenancy.caller(headers)?;
    let write = caller.write(headers)?;
    Ok((fabric, write, caller.read(headers).unwrap_or_default()))
}

/// The `{id}` of a path.
fn handle(id: &str) -> Result<ArenaHandle, ApiError> {
    ArenaHandle::parse(id).ok_or_else(|| {
        ApiError::InvalidArenaId(format!(
            "expected 32 hex digits, found {:?}",
            id.chars().take(40).collect::<String>()
        ))
    })
}

/// The `{layer}` of a path.
fn layer(s: &str) -> Result<u32, ApiError> {
    s.parse().map_err(|_| {
        ApiError::InvalidLayer(format!(
            "expected a layer index, found {:?}",
            s.chars().take(40).collect::<String>()
        ))
    })
}

/// The whole body, within the node's body limit and deadline.
async fn body(app: &App, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let timeout = app.limits.body_read_timeout;
    let max = app.limits.max_body_bytes;
    if let Some(n) = headers::content_length(headers)? {
        if n > max {
            return Err(ApiError::BodyTooLarge(format!(
                "expected at most {max} bytes, found {n}"
            )));
        }
    }
    read_bounded(body, max, Instant::now() + timeout, timeout.as_millis()).await
}

fn rows(r: ArenaRows) -> Response {
    let mut resp = Body::from(r.bytes).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(ROWS, HeaderValue::from(r.rows));
    resp
}

/// `POST /v1/arenas`: a new arena for one request of `kvfabric-model`.
pub(crate) async fn create(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let fabric = app.fabric()?;
    let ns = app.tenancy.caller(&headers)?.write(&headers)?;
    let model = app
        .catalog
        .lookup(headers::required(&headers, headers::MODEL)?)
        .map_err(ApiError::from_store)?;
    let s = fabric
        .arena_create(ns, model)
        .map_err(ApiError::from_fabric)?;
    Ok((StatusCode::CREATED, super::json(&status_body(&s))).into_response())
}

/// `GET /v1/arenas/{id}`: its model, sizes and every layer's rows.
pub(crate) async fn status(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (fabric, read) = reader(&app, &headers)?;
    let s = fabric
        .arena_status(&read, handle(&id)?)
        .map_err(ApiError::from_fabric)?;
    Ok(super::json(&status_body(&s)))
}

/// `DELETE /v1/arenas/{id}`: frees it.
pub(crate) async fn free(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (fabric, write, read) = writer(&app, &headers)?;
    fabric
        .arena_free(write, &read, handle(&id)?)
        .map_err(ApiError::from_fabric)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The append answer of a whole token.
#[derive(Serialize)]
struct TokenBody {
    /// Tokens appended so far.
    tokens: u64,
    /// Layers whose group this token completed (drain each before the next token).
    complete: Vec<u32>,
}

/// `POST /v1/arenas/{id}/tokens`: one token's rows of every layer, or nothing.
pub(crate) async fn append_token(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    raw: Body,
) -> Result<Response, ApiError> {
    let (fabric, write, read) = writer(&app, &headers)?;
    let h = handle(&id)?;
    let rows = body(&app, &headers, raw).await?;
    let done = fabric
        .arena_append_token(write, &read, h, &rows)
        .map_err(ApiError::from_fabric)?;
    Ok(super::json(&TokenBody {
        tokens: done.tokens,
        complete: done.complete,
    }))
}

/// `POST /v1/arenas/{id}/layers/{layer}/rows`: that layer's next row.
pub(crate) async fn append_row(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path((id, index)): Path<(String, String)>,
    raw: Body,
) -> Result<Response, ApiError> {
    let (fabric, write, read) = writer(&app, &headers)?;
    let (h, l) = (handle(&id)?, layer(&index)?);
    let row = body(&app, &headers, raw).await?;
    let after = fabric
        .arena_append_row(write, &read, h, l, &row)
        .map_err(ApiError::from_fabric)?;
    Ok(super::json(&layer_body(l, &after)))
}

/// `GET /v1/arenas/{id}/layers/{layer}/window`: the window's rows, oldest first.
pub(crate) async fn window(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path((id, index)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (fabric, read) = reader(&app, &headers)?;
    let w = fabric
        .arena_window(&read, handle(&id)?, layer(&index)?)
        .map_err(ApiError::from_fabric)?;
    Ok(rows(w))
}

/// `POST /v1/arenas/{id}/layers/{layer}/drain`: the completed group's rows, emptied.
pub(crate) async fn drain(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path((id, index)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (fabric, write, read) = writer(&app, &headers)?;
    let g = fabric
        .arena_drain(write, &read, handle(&id)?, layer(&index)?)
        .map_err(ApiError::from_fabric)?;
    Ok(rows(g))
}
