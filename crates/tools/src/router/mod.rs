//! `kvfabric router`: a reference HTTP router in front of engines (e.g. `kvfabric
//! engine-sim`), one per kvfabric node.
//!
//! `POST /v1/generate` computes the prompt's chunk keys, asks a kvfabric node
//! `POST /v1/route` (mode `any` for the `kvfabric` policy, `prefix` for `prefix`; nothing for
//! `round-robin`), ranks the backends by their node's estimate adjusted for the load the router
//! sees ([`pick`]), and forwards to the best one, then the next if it fails ([`forward`]); the
//! answer is the backend's plus `routed_to`, `score` (the node's route entry) and `route` (the
//! ranking). `GET /v1/backends` lists backends with their counters; `PUT
//! /v1/backends/{node}/load {"extra": n}` sets a load override (requests counted as in flight
//! beyond the real ones: for draining a backend, and for deterministic tests); `GET /metrics`;
//! `GET /healthz`.

pub mod forward;
pub mod pick;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use clap::{Args, ValueEnum};
use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::{ModelGeometry, NamespaceKey};
use serde_json::{json, Value};

use crate::client::{Client, ClientArgs};
use crate::json_api::{self, JsonError};
use crate::metrics_text::{Kind, MetricsText};

/// Longest one forward may take (a cold prompt at a slow prefill rate).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(600);
/// Bound on connecting to a backend (a dead one fails fast).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How the router picks a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Policy {
    /// kvfabric scoring: `/v1/route` mode `any` (every chunk the cluster holds, wherever it
    /// sits); engines look up in mode `any`.
    Kvfabric,
    /// Prefix-only scoring (what today's routers do): `/v1/route` mode `prefix`; engines use
    /// their node's blocks by prefix key only.
    Prefix,
    /// Round-robin, blind to blocks and load; engines as for `prefix`.
    RoundRobin,
}

impl Policy {
    /// The CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Kvfabric => "kvfabric",
            Policy::Prefix => "prefix",
            Policy::RoundRobin => "round-robin",
        }
    }
}

/// Arguments of `kvfabric router`.
#[derive(Debug, Args)]
pub struct RouterArgs {
    /// Address to serve on (port 0: any; the line printed names it).
    #[arg(long, default_value = "127.0.0.1:7500")]
    listen: String,
    /// A backend: NODE_ID=ENGINE_URL, e.g. n1=http://127.0.0.1:7501 (repeat; the node id is
    /// the kvfabric node the engine reads from, as `/v1/route` names it).
    #[arg(long = "backend", required = true)]
    backends: Vec<String>,
    /// The kvfabric node asked for scores.
    #[arg(long, env = "KVFABRIC_NODE", default_value = "http://127.0.0.1:7101")]
    node: String,
    /// Bearer token for the node.
    #[arg(long, env = "KVFABRIC_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How to pick a backend.
    #[arg(long, value_enum, default_value_t = Policy::Kvfabric)]
    policy: Policy,
    /// The model preset (an embedded one) the prompts' chunk keys are computed for.
    #[arg(long, default_value = crate::engine_sim::MODEL_DEFAULT)]
    model: String,
    /// Namespace the chunk keys are derived in ("default" on an open node).
    #[arg(long, default_value = kvfabric_core::OPEN_NAMESPACE)]
    namespace: String,
}

/// One backend and its counters.
pub struct Backend {
    /// The node its engine reads from (`n1`).
    pub node: String,
    /// The engine's base URL.
    pub url: String,
    /// Requests the router has forwarded to it and not yet seen answered.
    pub in_flight: AtomicU64,
    /// Requests counted as in flight beyond the real ones.
    pub load_override: AtomicU64,
    /// Requests it answered.
    pub forwarded: AtomicU64,
    /// Requests it refused (4xx, passed through).
    pub refused: AtomicU64,
    /// Forwards that failed (connection, 5xx).
    pub failures: AtomicU64,
}

impl Backend {
    /// In flight plus the override.
    pub fn load(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst) + self.load_override.load(Ordering::SeqCst)
    }
}

/// The router's shared state.
pub struct RouterState {
    /// Backends in the order given.
    pub backends: Vec<Backend>,
    /// The node asked for scores.
    pub node: Client,
    /// The policy.
    pub policy: Policy,
    /// The model.
    pub geometry: ModelGeometry,
    /// The namespace of the chunk keys.
    pub namespace: NamespaceKey,
    /// The client for backends.
    pub agent: ureq::Agent,
    /// Round-robin turn (also the tie-break start).
    pub turn: AtomicUsize,
    /// Requests refused with a 4xx by the router itself.
    pub rejected: AtomicU64,
    /// Requests no backend answered (503).
    pub unavailable: AtomicU64,
    /// `/v1/route` calls that failed (the router then ranks by load alone).
    pub route_failures: AtomicU64,
}

/// Parses `NODE_ID=URL` (`1=` is read as `n1=`).
pub fn parse_backend(s: &str) -> anyhow::Result<(String, String)> {
    let (node, url) = s
        .split_once('=')
        .with_context(|| format!("--backend {s:?}: expected NODE_ID=URL"))?;
    let node = node.trim();
    anyhow::ensure!(!node.is_empty(), "--backend {s:?}: empty node id");
    let node = if node.bytes().all(|b| b.is_ascii_digit()) {
        format!("n{node}")
    } else {
        node.to_owned()
    };
    let url = url.trim().trim_end_matches('/');
    anyhow::ensure!(
        url.starts_with("http://") && url.len() > "http://".len(),
        "--backend {s:?}: expected an http:// URL"
    );
    Ok((node, url.to_owned()))
}

impl RouterState {
    /// A router over `backends` (`(node, url)`), scoring on `node`.
    pub fn new(
        backends: Vec<(String, String)>,
        node: &str,
        token: Option<String>,
        policy: Policy,
        model: &str,
        namespace: &str,
    ) -> anyhow::Result<RouterState> {
        anyhow::ensure!(!backends.is_empty(), "--backend: at least one is needed");
        let geometry = builtin_preset(model)
            .with_context(|| format!("--model: no embedded preset {model:?}"))?;
        let client = Client::new(&ClientArgs {
            node: node.to_owned(),
            token,
        })?;
        let agent: ureq::Agent = kvfabric_http_client::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(FORWARD_TIMEOUT))
                .timeout_connect(Some(CONNECT_TIMEOUT))
                .build(),
        );
        Ok(RouterState {
            backends: backends
                .into_iter()
                .map(|(node, url)| Backend {
                    node,
                    url,
                    in_flight: AtomicU64::new(0),
                    load_override: AtomicU64::new(0),
                    forwarded: AtomicU64::new(0),
                    refused: AtomicU64::new(0),
                    failures: AtomicU64::new(0),
                })
                .collect(),
            node: client,
            policy,
            geometry,
            namespace: NamespaceKey::derive(namespace),
            agent,
            turn: AtomicUsize::new(0),
            rejected: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            route_failures: AtomicU64::new(0),
        })
    }
}

/// Runs `kvfabric router` until SIGINT or SIGTERM.
pub fn run(a: RouterArgs) -> anyhow::Result<()> {
    let backends = a
        .backends
        .iter()
        .map(|b| parse_backend(b))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let state = Arc::new(RouterState::new(
        backends,
        &a.node,
        a.token,
        a.policy,
        &a.model,
        &a.namespace,
    )?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = json_api::bind(&a.listen).await?;
        let addr = listener.local_addr()?;
        println!(
            "kvfabric router listening on http://{addr} (policy {}, {} backends, node {})",
            a.policy.as_str(),
            state.backends.len(),
            a.node
        );
        serve(listener, state, crate::engine_sim::shutdown_signal()).await
    })
}

/// Serves the router on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<RouterState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/v1/generate", post(generate_handler))
        .route("/v1/backends", get(backends_handler))
        .route("/v1/backends/{node}/load", put(load_override_handler))
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(json_api::not_found)
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving")
}

/// Starts a router on `127.0.0.1:0` in the current runtime; its address.
pub async fn spawn_local(
    state: Arc<RouterState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let listener = json_api::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    Ok((addr, tokio::spawn(serve(listener, state, shutdown))))
}

async fn generate_handler(State(state): State<Arc<RouterState>>, body: Body) -> Response {
    let req = match json_api::read_body(body)
        .await
        .and_then(|b| json_api::parse_generate(&b))
    {
        Ok(r) => r,
        Err(e) => {
            state.rejected.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    let s = Arc::clone(&state);
    match tokio::task::spawn_blocking(move || forward::handle(&s, req)).await {
        Ok(Ok(v)) => json_api::ok_json(&v),
        Ok(Err(forward::ReplyError::Json(e))) => e.into_response(),
        Ok(Err(forward::ReplyError::Passthrough(status, bytes))) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => JsonError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            .into_response(),
    }
}

fn backend_json(b: &Backend) -> Value {
    json!({
        "node": b.node,
        "url": b.url,
        "in_flight": b.in_flight.load(Ordering::SeqCst),
        "load_override": b.load_override.load(Ordering::SeqCst),
        "forwarded": b.forwarded.load(Ordering::Relaxed),
        "refused": b.refused.load(Ordering::Relaxed),
        "failures": b.failures.load(Ordering::Relaxed),
    })
}

async fn backends_handler(State(state): State<Arc<RouterState>>) -> Response {
    json_api::ok_json(&json!({
        "policy": state.policy.as_str(),
        "backends": state.backends.iter().map(backend_json).collect::<Vec<_>>(),
    }))
}

async fn load_override_handler(
    State(state): State<Arc<RouterState>>,
    Path(node): Path<String>,
    body: Body,
) -> Response {
    let refuse = |e: JsonError| {
        state.rejected.fetch_add(1, Ordering::Relaxed);
        e.into_response()
    };
    let Some(b) = state.backends.iter().find(|b| b.node == node) else {
        return refuse(JsonError::new(
            StatusCode::NOT_FOUND,
            "unknown_backend",
            format!(
                "no backend for node {:?}",
                node.chars().take(64).collect::<String>()
            ),
        ));
    };
    let bytes = match json_api::read_body(body).await {
        Ok(b) => b,
        Err(e) => return refuse(e),
    };
    let extra = match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => match v.get("extra").and_then(Value::as_u64) {
            Some(n) if n <= 1_000_000 => n,
            _ => {
                return refuse(JsonError::bad(
                    "invalid_load",
                    format!("expected {{\"extra\": 0..=1000000}}, found {v}"),
                ))
            }
        },
        Err(e) => return refuse(JsonError::bad("invalid_json", format!("request body: {e}"))),
    };
    b.load_override.store(extra, Ordering::SeqCst);
    json_api::ok_json(&backend_json(b))
}

/// One per-backend series: family, kind, help, value.
type PerBackendSeries = (&'static str, Kind, &'static str, fn(&Backend) -> u64);

async fn metrics_handler(State(s): State<Arc<RouterState>>) -> String {
    let mut m = MetricsText::default();
    let per_backend: [PerBackendSeries; 4] = [
        (
            "kvfabric_router_forwarded",
            Kind::Counter,
            "requests a backend answered",
            |b| b.forwarded.load(Ordering::Relaxed),
        ),
        (
            "kvfabric_router_backend_failures",
            Kind::Counter,
            "forwards that failed",
            |b| b.failures.load(Ordering::Relaxed),
        ),
        (
            "kvfabric_router_refused",
            Kind::Counter,
            "requests a backend refused (4xx)",
            |b| b.refused.load(Ordering::Relaxed),
        ),
        (
            "kvfabric_router_load",
            Kind::Gauge,
            "requests in flight plus the load override",
            |b| b.load(),
        ),
    ];
    for (family, kind, help, f) in per_backend {
        m.family(family, kind, help);
        for b in &s.backends {
            m.sample(family, kind, &[("backend", &b.node.to_string())], f(b));
        }
    }
    for (family, help, v) in [
        (
            "kvfabric_router_rejected",
            "requests refused by the router (4xx)",
            &s.rejected,
        ),
        (
            "kvfabric_router_unavailable",
            "requests no backend answered (503)",
            &s.unavailable,
        ),
        (
            "kvfabric_router_route_failures",
            "route calls that failed",
            &s.route_failures,
        ),
    ] {
        m.single(family, Kind::Counter, help, v.load(Ordering::Relaxed));
    }
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse() {
        assert_eq!(
            parse_backend("n2=http://127.0.0.1:7302/").unwrap(),
            ("n2".to_owned(), "http://127.0.0.1:7302".to_owned())
        );
        assert_eq!(parse_backend("3=http://h:1").unwrap().0, "n3");
        for bad in ["n1", "=http://h:1", "n1=https://h:1", "n1=http://"] {
            assert!(parse_backend(bad).is_err(), "{bad}");
        }
    }
}
