//! `POST /v1/route`: for a request's chunk keys, every candidate node scored by what serving
//! it there would cost, best first ([`kvfabric_core::Fabric::route`]; the cost model is
//! `kvfabric_core::route::score`). A key another tenant put resolves to nothing, so the answer
//! has the same code and shape as for keys nobody put.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use kvfabric_core::decide::score::{Mode, NodeScore};
use kvfabric_core::fabric::RouteQuery;
use kvfabric_core::presets::Model;
use kvfabric_core::{ChunkKey, Fabric};
use kvfabric_store::StoreError;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::http::body::read_bounded;
use crate::http::errors::ApiError;
use crate::http::metrics::ReasonLabels;
use crate::http::{App, AppState};

/// Bytes of JSON allowed per chunk (two keys of 64 hex digits, quotes, commas, spacing).
const BODY_BYTES_PER_CHUNK: u64 = 160;
/// Bytes of JSON allowed besides the keys.
const BODY_BYTES_BASE: u64 = 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteRequest {
    keys: Vec<String>,
    #[serde(default)]
    chunks: Option<Vec<String>>,
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Serialize)]
struct RouteResponse {
    model: String,
    chunks: usize,
    block_tokens: u32,
    block_bytes: u64,
    nodes: Vec<NodeScore>,
    bandwidth_source: &'static str,
}

/// The handler: counts every answer and every refusal by code.
pub(crate) async fn route(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match answer(&app, &headers, body).await {
        Ok(r) => {
            app.metrics.route_requests.inc();
            Ok(r)
        }
        Err(e) => {
            app.metrics
                .route_refused
                .get_or_create(&ReasonLabels { reason: e.code() })
                .inc();
            Err(e)
        }
    }
}

async fn answer(app: &App, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let fabric = app.fabric()?;
    let read = app.tenancy.caller(headers)?.read(headers)?;
    let max_keys = app.limits.max_lookup_keys;
    let max_bytes = BODY_BYTES_BASE + BODY_BYTES_PER_CHUNK * u64::from(max_keys);
    let deadline = Instant::now() + app.limits.body_read_timeout;
    let timeout_ms = app.limits.body_read_timeout.as_millis();
    let raw = read_bounded(body, max_bytes, deadline, timeout_ms).await?;
    let req: RouteRequest =
        serde_json::from_slice(&raw).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    if req.keys.len() > max_keys as usize {
        return Err(ApiError::TooManyKeys {
            max: max_keys,
            found: req.keys.len(),
        });
    }
    let mode = req.mode.unwrap_or(Mode::Any);
    let keys = parse_keys("keys", &req.keys)?;
    let independent = match (&req.chunks, mode) {
        (Some(c), Mode::Any) => {
            if c.len() != keys.len() {
                return Err(ApiError::InvalidJson(format!(
                    "`chunks` must be as long as `keys`: expected {}, found {}",
                    keys.len(),
                    c.len()
                )));
            }
            Some(parse_keys("chunks", c)?)
        }
        _ => None,
    };
    let model = match &req.model {
        Some(name) => Some(storable(fabric, name)?),
        None => None,
    };
    let q = RouteQuery {
        keys,
        independent,
        mode,
        model,
        measured_links: app.tenancy.is_open(),
    };
    let answer = fabric
        .route(&read, q)
        .await
        .map_err(ApiError::from_fabric)?;
    Ok(super::json(&RouteResponse {
        model: answer.model,
        chunks: answer.chunks,
        block_tokens: answer.block_tokens,
        block_bytes: answer.block_bytes,
        nodes: answer.nodes,
        bandwidth_source: if answer.measured {
            "measured"
        } else {
            "configured"
        },
    }))
}

/// Parses hex chunk keys, naming the field and index of a bad one.
fn parse_keys(field: &str, keys: &[String]) -> Result<Vec<ChunkKey>, ApiError> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            ChunkKey::from_hex(k)
                .map_err(|e| ApiError::InvalidChunkKey(format!("{field}[{i}]: {e}")))
        })
        .collect()
}

/// The preset named `name`, which must be storable.
fn storable<'a>(fabric: &'a Fabric, name: &str) -> Result<&'a Model, ApiError> {
    let model = fabric
        .catalog()
        .lookup(name)
        .map_err(ApiError::from_store)?;
    if !model.geometry.is_storable() {
        return Err(ApiError::from_store(StoreError::NotStorable {
            name: model.geometry.name.clone(),
            kind: model.geometry.kind().name(),
        }));
    }
    Ok(model)
}
