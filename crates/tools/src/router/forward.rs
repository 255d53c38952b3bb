//! One routed request, blocking: chunk keys, `POST /v1/route` on the router's node, the
//! ranking ([`super::pick`]), and forwarding to backends best first until one answers.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::http::StatusCode;
use kvfabric_store::{chunk_keys, ChunkKey, ChunkMode};
use serde_json::{json, Value};

use super::pick::{rank, rotation, Candidate};
use super::{Policy, RouterState};
use crate::client::read_json;
use crate::json_api::{GenerateRequest, JsonError, LookupMode};

/// Largest backend answer the router reads.
const ANSWER_BYTES_MAX: u64 = 1 << 20;

/// The node's route answer, reduced: each backend's estimate and the node entries.
struct RouteAnswer {
    /// Per backend, its node's `est_seconds` if listed.
    est: Vec<Option<f64>>,
    /// The `nodes` array as the node answered it.
    nodes: Vec<Value>,
}

/// `POST /v1/route` for the request's keys.
fn route(state: &RouterState, tokens: &[u32], mode: &str) -> anyhow::Result<RouteAnswer> {
    let g = &state.geometry;
    let hex = |keys: Vec<ChunkKey>| keys.iter().map(ChunkKey::to_hex).collect::<Vec<_>>();
    let keys = hex(chunk_keys(&state.namespace, g, ChunkMode::Prefix, tokens));
    let chunks = hex(chunk_keys(
        &state.namespace,
        g,
        ChunkMode::Independent,
        tokens,
    ));
    let body = json!({ "keys": keys, "chunks": chunks, "mode": mode, "model": g.name });
    let mut resp = state.node.post_json("/v1/route", &body)?;
    let v = read_json(&mut resp)?;
    let nodes = v
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow::anyhow!("route answer without nodes: {v}"))?
        .clone();
    let est = state
        .backends
        .iter()
        .map(|b| {
            nodes
                .iter()
                .find(|n| n.get("node").and_then(Value::as_str) == Some(b.node.as_str()))
                .map(|n| {
                    n.get("est_seconds")
                        .and_then(Value::as_f64)
                        .unwrap_or(f64::MAX / 4.0)
                })
        })
        .collect();
    Ok(RouteAnswer { est, nodes })
}

/// How one forward ended.
enum Forwarded {
    /// The backend answered 2xx: its JSON.
    Answer(Value),
    /// The backend refused the request itself (4xx): passed through, no other backend tried.
    Refused(u16, Vec<u8>),
    /// The backend is down or failed (connection error, 5xx, unreadable answer).
    Failed(String),
}

fn forward(state: &RouterState, url: &str, body: &Value) -> Forwarded {
    let resp = state
        .agent
        .post(format!("{url}/v1/generate"))
        .header("content-type", "application/json")
        .send(serde_json::to_vec(body).unwrap_or_default().as_slice());
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => return Forwarded::Failed(e.to_string()),
    };
    let status = resp.status().as_u16();
    let bytes = match resp
        .body_mut()
        .with_config()
        .limit(ANSWER_BYTES_MAX)
        .read_to_vec()
    {
        Ok(b) => b,
        Err(e) => return Forwarded::Failed(format!("reading the answer: {e}")),
    };
    match status {
        200..=299 => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) if v.is_object() => Forwarded::Answer(v),
            _ => Forwarded::Failed("answer is not a JSON object".into()),
        },
        400..=499 => Forwarded::Refused(status, bytes),
        _ => Forwarded::Failed(format!(
            "status {status}: {}",
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(200)
                .collect::<String>()
        )),
    }
}

/// What the router answers: JSON (status, body).
pub type Reply = Result<Value, ReplyError>;

/// A non-200 answer of the router.
pub enum ReplyError {
    /// The router's own error.
    Json(JsonError),
    /// A backend's 4xx, passed through.
    Passthrough(u16, Vec<u8>),
}

/// Routes and forwards `req`.
pub fn handle(state: &RouterState, req: GenerateRequest) -> Reply {
    let start = Instant::now();
    let n = state.backends.len();
    let turn = state.turn.fetch_add(1, Ordering::Relaxed);
    let loads: Vec<u64> = state.backends.iter().map(|b| b.load()).collect();
    let engine_mode = req.mode.unwrap_or(match state.policy {
        Policy::Kvfabric => LookupMode::Any,
        Policy::Prefix | Policy::RoundRobin => LookupMode::Prefix,
    });
    let route_mode = match state.policy {
        Policy::Kvfabric => Some("any"),
        Policy::Prefix => Some("prefix"),
        Policy::RoundRobin => None,
    };
    let whole_chunks = req.tokens.len() / state.geometry.block_tokens() as usize;
    let mut route_error = None;
    let mut route_nodes = Vec::new();
    let order: Vec<Candidate> = match route_mode {
        Some(mode) if whole_chunks > 0 => match route(state, &req.tokens, mode) {
            Ok(r) => {
                route_nodes = r.nodes;
                rank(&r.est, &loads, turn)
            }
            Err(e) => {
                state.route_failures.fetch_add(1, Ordering::Relaxed);
                route_error = Some(crate::exit::one_line(&e));
                rank(&vec![None; n], &loads, turn)
            }
        },
        Some(_) => rank(&vec![None; n], &loads, turn),
        None => rotation(n, turn)
            .into_iter()
            .map(|i| Candidate {
                index: i,
                est_seconds: 0.0,
                load: loads[i],
                cost: 0.0,
            })
            .collect(),
    };
    let route_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut body = json!({ "tokens": req.tokens, "mode": engine_mode.as_str() });
    if let Some(id) = &req.request_id {
        body["request_id"] = json!(id);
    }
    let mut failed = Vec::new();
    for c in &order {
        let b = &state.backends[c.index];
        b.in_flight.fetch_add(1, Ordering::SeqCst);
        let outcome = forward(state, &b.url, &body);
        b.in_flight.fetch_sub(1, Ordering::SeqCst);
        match outcome {
            Forwarded::Answer(mut v) => {
                b.forwarded.fetch_add(1, Ordering::Relaxed);
                let score = route_nodes
                    .iter()
                    .find(|x| x.get("node").and_then(Value::as_str) == Some(b.node.as_str()))
                    .cloned()
                    .unwrap_or(Value::Null);
                v["routed_to"] = json!(b.node);
                v["score"] = score;
                v["route"] = json!({
                    "policy": state.policy.as_str(),
                    "mode": route_mode,
                    "route_ms": route_ms,
                    "error": route_error,
                    "failed": failed,
                    "candidates": order.iter().map(|c| json!({
                        "node": state.backends[c.index].node,
                        "est_seconds": c.est_seconds,
                        "load": c.load,
                        "cost": c.cost,
                    })).collect::<Vec<_>>(),
                    "nodes": route_nodes,
                });
                return Ok(v);
            }
            Forwarded::Refused(status, bytes) => {
                b.refused.fetch_add(1, Ordering::Relaxed);
                return Err(ReplyError::Passthrough(status, bytes));
            }
            Forwarded::Failed(why) => {
                b.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(backend = %b.node, url = %b.url, %why, "backend failed; trying the next");
                failed.push(json!({ "node": b.node, "error": why }));
            }
        }
    }
    state.unavailable.fetch_add(1, Ordering::Relaxed);
    Err(ReplyError::Json(JsonError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no_backend",
        format!(
            "no backend answered ({} tried: {})",
            failed.len(),
            failed
                .iter()
                .map(|f| format!(
                    "{} {}",
                    f["node"].as_str().unwrap_or("?"),
                    f["error"].as_str().unwrap_or("")
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    )))
}
