//! `POST /v1/lookup`: chunk keys → block and owners.
//!
//! On a cluster node the answer comes from this node's replica of the directory: the chunk
//! key (keyed by each namespace the caller may read, so tenants never see each other's keys)
//! → its block → the members holding it whose lease is current. On a standalone node it
//! covers what was put here with a chunk key: `owners` is `[this node]` for a key whose block
//! it holds. A key nobody knows gets `"block": null, "owners": []`; a key whose block is
//! dormant in the directory (every holder restarted or lost its lease, for at most a lease)
//! gets its block with `"owners": []`.
//!
//! `?consistency=linearizable` (cluster nodes) resolves chunk keys with a read index from the
//! leader, so the answer reflects every put completed before the lookup began; without a
//! leader or quorum within the directory's read timeout the answer is 503
//! `directory_unavailable`. The default, `local`, reads this node's replica (it may lag).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use kvfabric_directory::ReadConsistency;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::http::body::read_bounded;
use crate::http::errors::ApiError;
use crate::http::AppState;
use crate::ids::ChunkKey;

/// Bytes of JSON allowed per key (64 hex digits, quotes, a comma, some spacing).
const BODY_BYTES_PER_KEY: u64 = 80;
/// Bytes of JSON allowed besides the keys.
const BODY_BYTES_BASE: u64 = 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LookupRequest {
    keys: Vec<String>,
}

#[derive(Serialize)]
struct LookupResult {
    key: String,
    block: Option<String>,
    owners: Vec<String>,
}

#[derive(Serialize)]
struct LookupResponse {
    results: Vec<LookupResult>,
}

/// The handler.
pub(crate) async fn lookup(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Result<Response, ApiError> {
    let local = app.local()?;
    let consistency = query_consistency(uri.query())?;
    let read = app.tenancy.caller(&headers)?.read(&headers)?;
    let max_keys = app.limits.max_lookup_keys;
    let max_bytes = BODY_BYTES_BASE + BODY_BYTES_PER_KEY * u64::from(max_keys);
    let deadline = Instant::now() + app.limits.body_read_timeout;
    let timeout_ms = app.limits.body_read_timeout.as_millis();
    let raw = read_bounded(body, max_bytes, deadline, timeout_ms).await?;
    let req: LookupRequest =
        serde_json::from_slice(&raw).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    if req.keys.len() > max_keys as usize {
        return Err(ApiError::TooManyKeys {
            max: max_keys,
            found: req.keys.len(),
        });
    }
    let keys = req
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            ChunkKey::from_hex(k).map_err(|e| ApiError::InvalidChunkKey(format!("keys[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(cluster) = app.cluster.get() {
        let mut results = Vec::with_capacity(keys.len());
        for k in &keys {
            let block = cluster
                .resolve_chunk_at(&read, *k, consistency)
                .await
                .map_err(|e| ApiError::DirectoryUnavailable(e.to_string()))?;
            let owners = block
                .map(|b| cluster.live_owner_ids(&b))
                .unwrap_or_default();
            results.push(LookupResult {
                key: k.to_hex(),
                block: block.map(|b| b.to_hex()),
                owners: owners.iter().map(|n| n.to_string()).collect(),
            });
        }
        return Ok(super::json(&LookupResponse { results }));
    }
    let found = local.lookup(&read, &keys).map_err(ApiError::from_local)?;
    let me = app.node_id.to_string();
    let results = keys
        .iter()
        .zip(found)
        .map(|(k, block)| LookupResult {
            key: k.to_hex(),
            owners: block.iter().map(|_| me.clone()).collect(),
            block: block.map(|b| b.to_hex()),
        })
        .collect();
    Ok(super::json(&LookupResponse { results }))
}

/// The `consistency` of a lookup's query string (`local`, the default, or `linearizable`);
/// any other parameter or value is refused.
fn query_consistency(query: Option<&str>) -> Result<ReadConsistency, ApiError> {
    let mut out = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let short = |x: &str| x.chars().take(40).collect::<String>();
        if k != "consistency" {
            return Err(ApiError::InvalidQuery(format!(
                "expected only `consistency`, found {:?}",
                short(k)
            )));
        }
        if out.is_some() {
            return Err(ApiError::InvalidQuery("`consistency` given twice".into()));
        }
        out = Some(match v {
            "local" => ReadConsistency::Local,
            "linearizable" => ReadConsistency::Linearizable,
            other => {
                return Err(ApiError::InvalidQuery(format!(
                    "consistency: expected `local` or `linearizable`, found {:?}",
                    short(other)
                )))
            }
        });
    }
    Ok(out.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consistency_parses_and_refuses_the_rest() {
        assert_eq!(query_consistency(None).unwrap(), ReadConsistency::Local);
        assert_eq!(
            query_consistency(Some("consistency=linearizable")).unwrap(),
            ReadConsistency::Linearizable
        );
        assert_eq!(
            query_consistency(Some("consistency=local")).unwrap(),
            ReadConsistency::Local
        );
        for bad in [
            "consistency=strong",
            "x=1",
            "consistency=local&consistency=local",
        ] {
            assert!(matches!(
                query_consistency(Some(bad)),
                Err(ApiError::InvalidQuery(_))
            ));
        }
    }
}
