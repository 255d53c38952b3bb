//! The request tracker: a middleware around every route that bounds the requests in flight
//! (503 `overloaded` beyond `limits.max_inflight_requests`; the probes `/healthz`, `/readyz`
//! and `/metrics` are exempt, so an overloaded node still reports itself), counts every request by route,
//! method and status and every error response by its code, and logs one structured line per
//! request.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::gauge::Gauge;

use super::errors::{ApiError, ErrorCode};
use super::metrics::{ReasonLabels, RequestLabels};
use super::AppState;

/// The route template of a path: a fixed set, so metric labels stay bounded.
pub(crate) fn route_label(path: &str) -> &'static str {
    match path {
        "/v1/blocks" => "/v1/blocks",
        p if p.starts_with("/v1/blocks/") => "/v1/blocks/{id}",
        "/v1/arenas" => "/v1/arenas",
        p if p.starts_with("/v1/arenas/") => arena_route(p),
        "/v1/lookup" => "/v1/lookup",
        "/v1/route" => "/v1/route",
        "/v1/models" => "/v1/models",
        "/v1/namespaces" => "/v1/namespaces",
        "/v1/cluster" => "/v1/cluster",
        "/v1/events" => "/v1/events",
        "/v1/operator/overview" => "/v1/operator/overview",
        "/v1/operator/events" => "/v1/operator/events",
        "/v1/operator/claims" => "/v1/operator/claims",
        "/v1/operator/directory" => "/v1/operator/directory",
        p if p == "/v1/operator/members" || p.starts_with("/v1/operator/members/") => {
            "/v1/operator/members"
        }
        p if p == "/dashboard" || p.starts_with("/dashboard/") => "/dashboard",
        "/metrics" => "/metrics",
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        _ => "other",
    }
}

/// The route template of a path under `/v1/arenas/`.
fn arena_route(path: &str) -> &'static str {
    let parts: Vec<&str> = path.trim_start_matches("/v1/arenas/").split('/').collect();
    match parts.as_slice() {
        [_] => "/v1/arenas/{id}",
        [_, "tokens"] => "/v1/arenas/{id}/tokens",
        [_, "layers", _, "rows"] => "/v1/arenas/{id}/layers/{layer}/rows",
        [_, "layers", _, "window"] => "/v1/arenas/{id}/layers/{layer}/window",
        [_, "layers", _, "drain"] => "/v1/arenas/{id}/layers/{layer}/drain",
        _ => "other",
    }
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        _ => "other",
    }
}

/// Decrements the in-flight gauge however the request ends (a client that goes away drops
/// the request future mid-way).
struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The middleware.
pub(crate) async fn track(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = method_label(req.method());
    let route = route_label(req.uri().path());
    let probe = matches!(route, "/healthz" | "/readyz" | "/metrics");
    let permit = if probe {
        Ok(None)
    } else {
        app.inflight.clone().try_acquire_owned().map(Some)
    };
    let resp = match permit {
        Err(_) => ApiError::Overloaded(app.limits.max_inflight_requests).into_response(),
        Ok(None) => next.run(req).await,
        Ok(Some(permit)) => {
            app.metrics.inflight.inc();
            let _guard = InFlight(app.metrics.inflight.clone());
            let resp = next.run(req).await;
            drop(permit);
            resp
        }
    };
    let status = resp.status().as_u16();
    app.metrics
        .requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status,
        })
        .inc();
    let code = resp.extensions().get::<ErrorCode>().map(|c| c.0);
    if let Some(reason) = code {
        app.metrics
            .rejected
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
    let elapsed_us = start.elapsed().as_micros() as u64;
    if status >= 500 {
        tracing::warn!(method, route, status, elapsed_us, error = code, "request");
    } else {
        tracing::info!(method, route, status, elapsed_us, error = code, "request");
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_labels_are_a_fixed_set() {
        assert_eq!(route_label("/v1/blocks/abc"), "/v1/blocks/{id}");
        assert_eq!(route_label("/v1/blocks"), "/v1/blocks");
        assert_eq!(route_label("/nope/../x"), "other");
        assert_eq!(route_label("/v1/arenas"), "/v1/arenas");
        assert_eq!(route_label("/v1/arenas/ab"), "/v1/arenas/{id}");
        assert_eq!(
            route_label("/v1/arenas/ab/tokens"),
            "/v1/arenas/{id}/tokens"
        );
        assert_eq!(
            route_label("/v1/arenas/ab/layers/7/window"),
            "/v1/arenas/{id}/layers/{layer}/window"
        );
        assert_eq!(route_label("/v1/arenas/ab/layers/7/x"), "other");
        assert_eq!(route_label("/v1/operator/claims"), "/v1/operator/claims");
        assert_eq!(
            route_label("/v1/operator/directory"),
            "/v1/operator/directory"
        );
        assert_eq!(route_label("/v1/namespaces"), "/v1/namespaces");
        assert_eq!(method_label(&Method::PATCH), "other");
    }
}
