//! The route table of the HTTP API.
//!
//! | method, path | success | refusals |
//! |---|---|---|
//! | `PUT /v1/blocks` | 201 put response (`replicas`: verified copies) | 400, 401, 403, 408, 413, 503, 507 |
//! | `GET /v1/blocks/{id}` (`?position=P`) | 200 payload | 400, 401, 403, 404, 503 `owners_unreachable` |
//! | `HEAD /v1/blocks/{id}` | what GET would answer (length, source, tier), no body | 400, 401, 403, 404, 503 `owners_unreachable` |
//! | `DELETE /v1/blocks/{id}` | 204 | 400, 401, 403, 404 |
//! | `POST /v1/lookup` (`?consistency=local\|linearizable`) | 200 results | 400, 401, 403, 408, 413, 503 |
//! | `POST /v1/route` | 200 nodes ranked best first | 400, 401, 403, 408, 413, 503 |
//! | `POST /v1/arenas`, `GET`/`DELETE /v1/arenas/{id}`, `POST /v1/arenas/{id}/tokens`, `POST /v1/arenas/{id}/layers/{layer}/rows`, `GET .../window`, `POST .../drain` | per-request arenas of hybrid models (see [`arenas`]) | 400, 401, 403, 404, 409, 413, 507 |
//! | `GET /v1/models` | 200 presets | 401 |
//! | `GET /v1/namespaces` | 200 the caller's readable namespaces and their keys | 401 |
//! | `GET /v1/cluster` | 200 members | 401 |
//! | `GET /v1/events` (`?since=SEQ`, `?scope=node\|cluster`, `Last-Event-ID`) | 200 `text/event-stream` | 400, 401, 403, 410 `replay_gap`, 503 `too_many_subscribers` |
//! | `GET /v1/operator/overview` | 200 members with tiers and counters, links (operator) | 401, 403 `operator_only`/`operator_disabled` |
//! | `GET /v1/operator/events` | 200 `text/event-stream`, every namespace (operator) | as `/v1/events`, 401, 403 |
//! | `GET /v1/operator/directory` | 200 the directory replica's digest and last applied entry (operator) | 401, 403, 503 `directory_unavailable` (standalone) |
//! | `POST /v1/operator/members` | 200 the member added (a voter), voters and learners (operator) | 400, 401, 403, 409 `membership_refused`, 503 `membership_incomplete` |
//! | `DELETE /v1/operator/members/{id}` | 200 the member drained and removed (operator) | 400, 401, 403, 409, 503 |
//! | `POST /v1/operator/claims` | 200 ownership records committed in this node's name, no payload (operator; see [`claims`]) | 400, 401, 403, 408, 413, 503 `directory_unavailable` |
//! | `GET /dashboard` (`/dashboard/app.js`, `app.css`, `favicon.svg`) | 200 the operator's page (static, no data) | |
//! | `GET /metrics` | 200 OpenMetrics text | |
//! | `GET /healthz` | 200 while the process serves | |
//! | `GET /readyz` | 200 once the store is open | 503 `not_ready` |
//!
//! On a cluster node: a put answers 201 only once `replication` verified copies exist on
//! distinct nodes, else 503 `replication_incomplete` (the message names the block and how many
//! copies exist; the local copy stays) or 503 `directory_unavailable` (ownership could not be
//! recorded); a get that misses locally fetches from the block's live owners and names the
//! one that served it in `kvfabric-source` (503 `owners_unreachable` when owners exist but none
//! served it; a head answers the same, from a probe); `/readyz` also waits for the node to have joined
//! the directory, a leader and its own join applied. Node-to-node requests are not HTTP routes:
//! they travel on the cluster's mutually authenticated QUIC endpoints (see `cluster::control`).
//!
//! Any other path is 404 `route_not_found`, another method 405 `method_not_allowed`. Every
//! route may also answer 503 `overloaded` (too many requests in flight) and the store-backed
//! ones 503 `not_ready` while the store opens (on a cluster member, until its cluster side has
//! started). `/metrics`, `/healthz`, `/readyz` and the dashboard's static page need no token;
//! everything under `/v1` does when the node has tenants, `/v1/operator/…` the operator's
//! (see `http::operator`).

mod arenas;
mod blocks;
mod claims;
mod dashboard;
pub(crate) mod events;
mod events_render;
mod info;
mod lookup;
mod members;
mod namespaces;
mod operator;
mod put;
mod route;

use axum::routing::{delete, get, post, put};
use axum::Router;

use super::errors::ApiError;
use super::AppState;

/// The API's routes, with `state`.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/blocks", put(put::put_block))
        .route(
            "/v1/blocks/{id}",
            get(blocks::get_block)
                .head(blocks::head_block)
                .delete(blocks::delete_block),
        )
        .route("/v1/arenas", post(arenas::create))
        .route(
            "/v1/arenas/{id}",
            get(arenas::status).merge(delete(arenas::free)),
        )
        .route("/v1/arenas/{id}/tokens", post(arenas::append_token))
        .route(
            "/v1/arenas/{id}/layers/{layer}/rows",
            post(arenas::append_row),
        )
        .route("/v1/arenas/{id}/layers/{layer}/window", get(arenas::window))
        .route("/v1/arenas/{id}/layers/{layer}/drain", post(arenas::drain))
        .route("/v1/lookup", post(lookup::lookup))
        .route("/v1/route", post(route::route))
        .route("/v1/models", get(info::models))
        .route("/v1/namespaces", get(namespaces::namespaces))
        .route("/v1/cluster", get(info::cluster))
        .route("/v1/events", get(events::events))
        .route("/v1/operator/overview", get(operator::overview))
        .route("/v1/operator/events", get(operator::events))
        .route("/v1/operator/directory", get(operator::directory))
        .route("/v1/operator/members", post(members::add))
        .route("/v1/operator/members/{id}", delete(members::remove))
        .route("/v1/operator/claims", post(claims::claim))
        .route("/dashboard", get(dashboard::index))
        .route("/dashboard/app.js", get(dashboard::script))
        .route("/dashboard/app.css", get(dashboard::style))
        .route("/dashboard/favicon.svg", get(dashboard::icon))
        .route("/metrics", get(info::metrics))
        .route("/healthz", get(info::healthz))
        .route("/readyz", get(info::readyz))
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::track::track,
        ))
        .with_state(state)
}

/// A JSON response body.
fn json<T: serde::Serialize>(v: &T) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::to_vec(v).expect("API responses always serialise");
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
