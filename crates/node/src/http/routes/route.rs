//! `POST /v1/route`: for a request's chunk keys, every candidate node scored by what serving
//! it there would cost (see `crate::route::score` for the cost model), best first.
//!
//! Holders come from this node's replica of the directory on a cluster node (each key
//! resolved under the namespaces the caller may read, exactly as `POST /v1/lookup` resolves
//! it, then the block's live owners with their tiers; candidates are the live members), and
//! from the local store on a standalone node (the only candidate). A key another tenant put
//! resolves to nothing, so another tenant's blocks are never counted, and the answer has the
//! same code and shape as for keys nobody put.
//!
//! The model (block tokens and bytes) is the request's `model`, else the one whose payload
//! length matches a block of the request held on this node (when exactly one preset has that
//! length); otherwise 400 `model_required`. Bandwidths between nodes are the measured ones
//! (asked of peers when their report is older than `cluster::links::LINKS_MAX_AGE_MS`), else
//! `route.default_bandwidth_gbps`.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use kvfabric_store::{BlockId, NamespaceKey, StoreError, Tier};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::http::body::read_bounded;
use crate::http::errors::ApiError;
use crate::http::metrics::ReasonLabels;
use crate::http::{App, AppState};
use crate::ids::{ChunkKey, NodeId};
use crate::local::LocalNode;
use crate::presets::Model;
use crate::route::score::{self, ChunkHolders, ChunkSize, Link, Mode, NodeScore, Speeds};

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
    let local = app.local()?;
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
    let named = match &req.model {
        Some(name) => Some(storable(app, name)?),
        None => None,
    };

    if app.clustered && app.cluster.get().is_none() {
        // Answering for this node alone would misrank a cluster.
        return Err(ApiError::ClusterNotReady("the cluster side is starting"));
    }
    let (candidates, holders, resolved) = match app.cluster.get() {
        Some(cluster) => {
            let mut holders = Vec::with_capacity(keys.len());
            let mut resolved = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                let mut c = ChunkHolders::default();
                let local = kvfabric_directory::ReadConsistency::Local;
                let resolve = |key| cluster.resolve_chunk_at(&read, key, local);
                if let Some(b) = resolve(*k).await.map_err(directory_unavailable)? {
                    c.prefix = cluster.live_holders(&b);
                    resolved.push(b);
                }
                if let Some(ind) = &independent {
                    if let Some(b) = resolve(ind[i]).await.map_err(directory_unavailable)? {
                        c.independent = cluster.live_holders(&b);
                        resolved.push(b);
                    }
                }
                holders.push(c);
            }
            let live = cluster.live_members();
            cluster.refresh_links(&live).await;
            (live, holders, resolved)
        }
        None => standalone(app, local, &read, &keys, independent.as_deref())?,
    };
    let model = match named {
        Some(m) => m,
        None => infer_model(app, local, &read, &resolved)?,
    };
    let size = ChunkSize {
        tokens: model.layout.block_tokens,
        bytes: model.layout.payload_len,
    };
    let cfg = &app.route;
    let speeds = Speeds {
        prefill_tokens_per_s: cfg.prefill_tokens_per_s,
        tier_read_gbps: [cfg.gpu_read_gbps, cfg.host_read_gbps, cfg.disk_read_gbps],
    };
    let cluster = app.cluster.get();
    let link = |from: NodeId, to: NodeId| match cluster.and_then(|c| c.bandwidth.gbps(from, to)) {
        Some(gbps) => Link {
            gbps,
            measured: true,
        },
        None => Link {
            gbps: cfg.default_bandwidth_gbps,
            measured: false,
        },
    };
    let ranking = score::rank(&candidates, &holders, mode, size, &speeds, &link);
    Ok(super::json(&RouteResponse {
        model: model.geometry.name.clone(),
        chunks: keys.len(),
        block_tokens: size.tokens,
        block_bytes: size.bytes,
        nodes: ranking.nodes,
        bandwidth_source: if ranking.measured {
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
fn storable<'a>(app: &'a App, name: &str) -> Result<&'a Model, ApiError> {
    let model = app.catalog.lookup(name).map_err(ApiError::from_store)?;
    if !model.geometry.is_storable() {
        return Err(ApiError::from_store(StoreError::NotStorable {
            name: model.geometry.name.clone(),
            kind: model.geometry.kind().name(),
        }));
    }
    Ok(model)
}

/// Candidates, holders and resolved blocks on a standalone node: itself and its store.
type Gathered = (Vec<NodeId>, Vec<ChunkHolders>, Vec<BlockId>);

fn standalone(
    app: &App,
    local: &LocalNode,
    read: &[NamespaceKey],
    keys: &[ChunkKey],
    independent: Option<&[ChunkKey]>,
) -> Result<Gathered, ApiError> {
    let me = app.node_id;
    let held = |found: Vec<Option<BlockId>>,
                resolved: &mut Vec<BlockId>|
     -> Result<Vec<Vec<(NodeId, Tier)>>, ApiError> {
        found
            .into_iter()
            .map(|b| {
                let Some(b) = b else { return Ok(Vec::new()) };
                let tier = local.head(read, &b).map_err(ApiError::from_local)?;
                Ok(match tier {
                    Some((t, _)) => {
                        resolved.push(b);
                        vec![(me, t)]
                    }
                    None => Vec::new(),
                })
            })
            .collect()
    };
    let mut resolved = Vec::new();
    let found = local.lookup(read, keys).map_err(ApiError::from_local)?;
    let prefix = held(found, &mut resolved)?;
    let ind = match independent {
        Some(ind) => {
            let found = local.lookup(read, ind).map_err(ApiError::from_local)?;
            held(found, &mut resolved)?
        }
        None => vec![Vec::new(); keys.len()],
    };
    let holders = prefix
        .into_iter()
        .zip(ind)
        .map(|(prefix, independent)| ChunkHolders {
            prefix,
            independent,
        })
        .collect();
    Ok((vec![me], holders, resolved))
}

/// The model of the request's blocks, from the first one held here whose payload length
/// names exactly one storable preset.
fn infer_model<'a>(
    app: &'a App,
    local: &LocalNode,
    read: &[NamespaceKey],
    resolved: &[BlockId],
) -> Result<&'a Model, ApiError> {
    let infos = app.catalog.infos();
    for b in resolved {
        let Some((_, len)) = local.head(read, b).map_err(ApiError::from_local)? else {
            continue;
        };
        let mut matching = infos.iter().filter(|m| m.storable && m.block_bytes == len);
        if let (Some(m), None) = (matching.next(), matching.next()) {
            return storable(app, &m.name);
        }
    }
    Err(ApiError::ModelRequired(if resolved.is_empty() {
        "no block of this request is known: name the model (`model`)".to_owned()
    } else {
        "the model of this request's blocks is not known here: name it (`model`)".to_owned()
    }))
}

/// A directory read that failed (a local read fails only when the member has stopped).
fn directory_unavailable(e: kvfabric_directory::DirectoryError) -> ApiError {
    ApiError::DirectoryUnavailable(e.to_string())
}
