//! The server loop: accept connections up to `limits.max_connections`, serve each with hyper's
//! HTTP/1.1 connection (header bytes, header count, header time and read buffer bounded), and on shutdown
//! stop accepting, let requests in flight finish (for at most [`SHUTDOWN_GRACE`]) and return.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::Limits;

/// Largest request line and headers together (431 beyond).
pub(crate) const HEADER_BYTES_MAX: usize = 64 << 10;
/// Largest read buffer of a connection (body frames arrive in pieces of at most this).
pub(crate) const READ_BUFFER_BYTES_MAX: usize = 256 << 10;
/// Most headers in one request.
pub(crate) const HEADERS_MAX: usize = 64;
/// Longest wait for requests in flight at shutdown.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Arc::new(Semaphore::new(limits.max_connections as usize));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(READ_BUFFER_BYTES_MAX)
        .max_header_size(HEADER_BYTES_MAX)
        .max_headers(HEADERS_MAX)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("connections drained"),
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "connections still open at shutdown");
        }
    }
}
