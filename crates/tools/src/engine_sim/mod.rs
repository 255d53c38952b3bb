//! `kvfabric engine-sim`: a stand-in LLM engine for tests and benchmarks, in front of one
//! kvfabric node.
//!
//! `POST /v1/generate {"tokens": [...], "request_id"?, "mode"?}` turns the prompt into chunk
//! keys, reads the blocks the fabric has, "prefills" the rest by waiting
//! `block_tokens / --prefill-tokens-per-s` seconds per chunk and producing the chunk's
//! deterministic bytes (the demo's chunk-local engine: the same chunk gives the same bytes
//! wherever it sits), and puts them under both chunk keys ([`generate`]). `GET /v1/load` is the
//! requests in flight; `GET /metrics` the engine's counters; `GET /healthz` liveness.

pub mod generate;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::{ModelGeometry, NamespaceKey};
use serde_json::json;

use crate::client::{Client, ClientArgs};
use crate::demo::driver::NodeApi;
use crate::json_api::{self, JsonError, LookupMode};
use crate::metrics_text::{Kind, MetricsText};

/// The model the engine runs unless told otherwise.
pub const MODEL_DEFAULT: &str = "deepseek-v3";
/// Prefill rate unless told otherwise (tokens per second of one request; the default of the
/// node's `[route] prefill_tokens_per_s`, so that `/v1/route` prices recomputing as it costs).
pub const PREFILL_DEFAULT: f64 = 8000.0;

/// Arguments of `kvfabric engine-sim`.
#[derive(Debug, Args)]
pub struct EngineSimArgs {
    /// The kvfabric node this engine reads from and writes to.
    #[arg(long, env = "KVFABRIC_NODE", default_value = "http://127.0.0.1:7101")]
    node: String,
    /// Bearer token for the node (selects the tenant namespace).
    #[arg(long, env = "KVFABRIC_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Address to serve on (port 0: any; the line printed names it).
    #[arg(long, default_value = "127.0.0.1:7501")]
    listen: String,
    /// The model preset (an embedded one).
    #[arg(long, default_value = MODEL_DEFAULT)]
    model: String,
    /// Namespace the chunk keys are derived in: the one the token writes to ("default" on an
    /// open node).
    #[arg(long, default_value = kvfabric_core::OPEN_NAMESPACE)]
    namespace: String,
    /// Tokens one request prefills per second (a missed chunk costs block_tokens / rate).
    #[arg(long, default_value_t = PREFILL_DEFAULT)]
    prefill_tokens_per_s: f64,
}

/// Everything an engine needs, shared by its requests.
pub struct Engine {
    /// Its node.
    pub node: NodeApi,
    /// The model.
    pub geometry: ModelGeometry,
    /// The namespace its chunk keys are derived in.
    pub namespace: NamespaceKey,
    /// Tokens prefilled per second.
    pub prefill_tokens_per_s: f64,
    /// Requests in flight.
    in_flight: AtomicU64,
    /// Requests answered 200.
    served: AtomicU64,
    /// Requests refused with a 4xx.
    rejected: AtomicU64,
    /// Requests that failed (node errors).
    failed: AtomicU64,
    /// Chunk hits on the engine's node, and fetched from others.
    hits_local: AtomicU64,
    hits_remote: AtomicU64,
    /// Tokens prefilled.
    recomputed_tokens: AtomicU64,
    /// Bytes of remote hits.
    bytes_fetched: AtomicU64,
}

impl Engine {
    /// An engine for `model` in front of `node`.
    pub fn new(
        node: &str,
        token: Option<String>,
        model: &str,
        namespace: &str,
        prefill_tokens_per_s: f64,
    ) -> anyhow::Result<Engine> {
        anyhow::ensure!(
            prefill_tokens_per_s.is_finite() && prefill_tokens_per_s > 0.0,
            "--prefill-tokens-per-s: expected a positive number, found {prefill_tokens_per_s}"
        );
        let geometry = builtin_preset(model)
            .with_context(|| format!("--model: no embedded preset {model:?}"))?;
        anyhow::ensure!(
            geometry.is_storable(),
            "--model {model}: an accounting-only preset cannot be stored"
        );
        let client = Client::new(&ClientArgs {
            node: node.to_owned(),
            token,
        })?;
        Ok(Engine {
            node: NodeApi {
                name: node.to_owned(),
                client,
            },
            geometry,
            namespace: NamespaceKey::derive(namespace),
            prefill_tokens_per_s,
            in_flight: AtomicU64::new(0),
            served: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            hits_local: AtomicU64::new(0),
            hits_remote: AtomicU64::new(0),
            recomputed_tokens: AtomicU64::new(0),
            bytes_fetched: AtomicU64::new(0),
        })
    }

    /// How long prefilling `tokens` takes.
    pub fn prefill_time(&self, tokens: u64) -> Duration {
        Duration::from_secs_f64(tokens as f64 / self.prefill_tokens_per_s)
    }
}

/// Runs `kvfabric engine-sim` until SIGINT or SIGTERM.
pub fn run(a: EngineSimArgs) -> anyhow::Result<()> {
    let engine = Arc::new(Engine::new(
        &a.node,
        a.token,
        &a.model,
        &a.namespace,
        a.prefill_tokens_per_s,
    )?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = json_api::bind(&a.listen).await?;
        let addr = listener.local_addr()?;
        println!(
            "kvfabric engine-sim listening on http://{addr} (node {})",
            a.node
        );
        serve(listener, engine, shutdown_signal()).await
    })
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Serves `engine` on `listener` until `shutdown` resolves (requests in flight finish).
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Arc<Engine>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/v1/generate", post(generate_handler))
        .route("/v1/load", get(load_handler))
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(json_api::not_found)
        .with_state(engine);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving")
}

/// Starts an engine server on `127.0.0.1:0` in the current runtime; its address.
pub async fn spawn_local(
    engine: Arc<Engine>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let listener = json_api::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    Ok((addr, tokio::spawn(serve(listener, engine, shutdown))))
}

/// Decrements the in-flight count when dropped.
struct InFlight(Arc<Engine>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn generate_handler(State(engine): State<Arc<Engine>>, body: Body) -> Response {
    let req = match json_api::read_body(body)
        .await
        .and_then(|b| json_api::parse_generate(&b))
    {
        Ok(r) => r,
        Err(e) => {
            engine.rejected.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    engine.in_flight.fetch_add(1, Ordering::SeqCst);
    let guard = InFlight(Arc::clone(&engine));
    let mode = req.mode.unwrap_or(LookupMode::Any);
    let e = Arc::clone(&engine);
    let tokens = req.tokens;
    let result = tokio::task::spawn_blocking(move || {
        let _guard = guard;
        generate::generate(&e, &tokens, mode)
    })
    .await;
    match result {
        Ok(Ok(g)) => {
            engine.served.fetch_add(1, Ordering::Relaxed);
            engine.hits_local.fetch_add(g.hits_local, Ordering::Relaxed);
            engine
                .hits_remote
                .fetch_add(g.hits_remote, Ordering::Relaxed);
            engine
                .recomputed_tokens
                .fetch_add(g.recomputed_tokens, Ordering::Relaxed);
            engine
                .bytes_fetched
                .fetch_add(g.bytes_fetched, Ordering::Relaxed);
            let mut v = g.to_json();
            v["mode"] = json!(mode.as_str());
            v["model"] = json!(engine.geometry.name);
            if let Some(id) = req.request_id {
                v["request_id"] = json!(id);
            }
            json_api::ok_json(&v)
        }
        Ok(Err(e)) => {
            engine.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %format!("{e:#}"), "generate failed");
            JsonError::new(
                StatusCode::BAD_GATEWAY,
                "node_error",
                format!("the engine's node failed: {}", crate::exit::one_line(&e)),
            )
            .into_response()
        }
        Err(e) => {
            engine.failed.fetch_add(1, Ordering::Relaxed);
            JsonError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                .into_response()
        }
    }
}

async fn load_handler(State(engine): State<Arc<Engine>>) -> Response {
    json_api::ok_json(&json!({ "in_flight": engine.in_flight.load(Ordering::SeqCst) }))
}

async fn metrics_handler(State(e): State<Arc<Engine>>) -> String {
    let mut m = MetricsText::default();
    m.single(
        "kvfabric_engine_in_flight",
        Kind::Gauge,
        "requests in flight",
        e.in_flight.load(Ordering::SeqCst),
    );
    for (family, help, v) in [
        ("kvfabric_engine_served", "requests answered 200", &e.served),
        (
            "kvfabric_engine_rejected",
            "requests refused with a 4xx",
            &e.rejected,
        ),
        (
            "kvfabric_engine_failed",
            "requests failed by the node",
            &e.failed,
        ),
        (
            "kvfabric_engine_hits_local",
            "chunks read from the engine's node",
            &e.hits_local,
        ),
        (
            "kvfabric_engine_hits_remote",
            "chunks fetched from other nodes",
            &e.hits_remote,
        ),
        (
            "kvfabric_engine_recomputed_tokens",
            "tokens prefilled",
            &e.recomputed_tokens,
        ),
        (
            "kvfabric_engine_bytes_fetched",
            "payload bytes of remote hits",
            &e.bytes_fetched,
        ),
    ] {
        m.single(family, Kind::Counter, help, v.load(Ordering::Relaxed));
    }
    m.finish()
}
