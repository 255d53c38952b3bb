//! `POST /v1/lookup`: chunk keys → block and owners ([`kvfabric_core::Fabric::lookup`]).
//!
//! A key nobody knows gets `"block": null, "owners": []`; a key whose block is dormant in the
//! directory (every holder restarted or lost its lease, for at most a lease) gets its block
//! with `"owners": []`. `?consistency=linearizable` (cluster nodes) resolves chunk keys with a
//! read index from the leader, so the answer reflects every put completed before the lookup
//! began; without a leader or quorum within the directory's read timeout the answer is 503
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
use kvfabric_core::ChunkKey;

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
    let fabric = app.fabric()?;
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
    let results = fabric
        .lookup(&read, &keys, consistency)
        .await
        .map_err(ApiError::from_fabric)?
        .into_iter()
        .map(|r| LookupResult {
            key: r.key.to_hex(),
            block: r.block.map(|b| b.to_hex()),
            owners: r.owners.iter().map(|n| n.to_string()).collect(),
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
