//! `GET /dashboard` (and its script, style sheet and icon): the operator's dashboard, a static page
//! compiled into the binary (`src/http/dashboard/`; no build step, nothing fetched from
//! elsewhere). The page holds no data and needs no token; it reads the operator token from
//! its URL fragment (`/dashboard#token=…`, never sent to the server) or asks for it, then
//! polls `GET /v1/operator/overview` and streams `GET /v1/operator/events` with it.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX_HTML: &str = include_str!("../dashboard/index.html");
const APP_JS: &str = include_str!("../dashboard/app.js");
const APP_CSS: &str = include_str!("../dashboard/app.css");
const FAVICON_SVG: &str = include_str!("../dashboard/favicon.svg");

/// Only this node's own scripts, styles and feeds; no framing by other sites.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// `GET /dashboard`.
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /dashboard/app.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /dashboard/app.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// `GET /dashboard/favicon.svg`.
pub(crate) async fn icon() -> Response {
    asset("image/svg+xml", FAVICON_SVG)
}
