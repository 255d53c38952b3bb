//! The baseline of `kvfabric bench node`: a minimal HTTP server on the node's own stack (hyper's
//! HTTP/1 server with the node's connection settings, an axum router, a multi-threaded tokio
//! runtime with as many workers as the node's) that receives a put's body and drops it, and
//! answers every get with the same bytes from memory (no copy). It knows nothing of blocks:
//! what it costs is what any HTTP server on this stack costs for these bytes. It runs as its
//! own process (`kvfabric bench node-baseline`, started by the bench like the node), so both
//! servers stand in the same place relative to the clients.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

/// The node's HTTP/1 read buffer bound (as `crates/node/src/http/serve.rs` sets it).
const READ_BUFFER_BYTES_MAX: usize = 256 << 10;

/// What the baseline serves.
#[derive(Clone)]
struct Served {
    /// The body of every get.
    body: Bytes,
    /// Put body bytes received (checked by the driver: the baseline read every byte).
    received: Arc<AtomicU64>,
}

/// Serves the baseline on loopback until the process is stopped: answers every get with a
/// `len`-byte body, and `GET /received` with the put body bytes received so far. Prints
/// `listening on http://IP:PORT` once bound (the node's own line, which the launcher reads).
pub(crate) fn serve(len: usize) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("bench-baseline")
        .enable_all()
        .build()
        .context("starting the baseline's runtime")?;
    let body = Bytes::from(super::load::payloads(1, 1, len).remove(0).remove(0));
    let state = Served {
        body,
        received: Arc::new(AtomicU64::new(0)),
    };
    let router = Router::new()
        .route("/v1/blocks", put(receive))
        .route("/v1/blocks/{id}", get(send))
        .route("/received", get(received))
        .with_state(state);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the baseline's port")?;
        let addr: SocketAddr = listener.local_addr()?;
        println!("listening on http://{addr}");
        let mut builder = http1::Builder::new();
        // The node's settings (`crates/node/src/http/serve.rs`).
        builder
            .timer(TokioTimer::new())
            .max_buf_size(READ_BUFFER_BYTES_MAX)
            .max_header_size(64 << 10)
            .max_headers(64)
            .keep_alive(true);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let conn = builder.serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(router.clone()),
            );
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    })
}

/// `GET /received`: put body bytes received so far.
async fn received(State(s): State<Served>) -> String {
    s.received.load(Ordering::Relaxed).to_string()
}

/// `PUT /v1/blocks`: reads the body frame by frame, keeps nothing, answers like the node (a
/// small JSON object naming a block).
async fn receive(State(s): State<Served>, body: Body) -> Response {
    let mut body = body;
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Some(d) = f.data_ref() {
                    n += d.len() as u64;
                }
            }
            Err(_) => return StatusCode::BAD_REQUEST.into_response(),
        }
    }
    s.received.fetch_add(n, Ordering::Relaxed);
    let id = format!("{n:064x}");
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{{\"block\":\"{id}\",\"dedup\":\"new\",\"bytes\":{n},\"replicas\":1}}"),
    )
        .into_response()
}

/// `GET /v1/blocks/{id}`: the same bytes every time, from memory.
async fn send(State(s): State<Served>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from(s.body.clone()),
    )
        .into_response()
}
