//! `GET /v1/namespaces`: the namespaces the caller may read (its own first, then the shared
//! ones) with their keys, so that a client can verify the id of every block it reads
//! (`blake3_keyed(key, header ‖ payload)`). A key is derived from the cluster's namespace
//! secret and the name: a caller learns the keys of the namespaces it may read and nothing
//! else (no other tenant's key, not the secret).
//!
//! `keys` lists the key puts use first, then those of the other secrets blocks may still be
//! read under during a rotation. `kvfabric-namespace` narrows the answer to that namespace
//! (403 `namespace_forbidden` if the caller may not read it).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;

use crate::http::errors::ApiError;
use crate::http::AppState;

#[derive(Serialize)]
struct NamespaceOut {
    name: String,
    access: &'static str,
    shared: bool,
    keys: Vec<String>,
}

#[derive(Serialize)]
struct NamespacesResponse {
    namespaces: Vec<NamespaceOut>,
}

/// `GET /v1/namespaces`.
pub(crate) async fn namespaces(
    State(app): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = app.tenancy.caller(&headers)?;
    Ok(super::json(&NamespacesResponse {
        namespaces: caller
            .views(&headers)?
            .into_iter()
            .map(|v| NamespaceOut {
                name: v.name,
                access: if v.writable { "write" } else { "read" },
                shared: v.shared,
                keys: v.keys.iter().map(|k| k.to_hex()).collect(),
            })
            .collect(),
    }))
}
