//! `POST /v1/operator/claims`: ownership records registered in this node's name without a
//! payload, for the operator (`[operator] token`): the directory's own load, one record or a
//! batch per request ([`kvfabric_core::Fabric::claim_records`]; `kvfabric bench directory`
//! drives the directory through it).
//!
//! Body: `{"claims": [{"block": HEX, "key": HEX}, …]}` — 1 to [`CLAIMS_PER_REQUEST_MAX`]
//! records, each a block id and optionally a chunk key (in the namespace the
//! `kvfabric-namespace` header names, else the first declared; `POST /v1/lookup` then resolves
//! it). Each becomes this node's claim on the block in its host tier, through the node's
//! batcher (the path a put's registration takes); the answer, `{"claimed": N}`, comes once
//! every record committed. 503 `directory_unavailable` when they did not (some may have) or
//! on a standalone node.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::http::body::read_bounded;
use crate::http::errors::ApiError;
use crate::http::AppState;
use kvfabric_core::ChunkKey;
use kvfabric_store::BlockId;

/// Most records one request may carry.
pub(crate) const CLAIMS_PER_REQUEST_MAX: usize = 4096;
/// Bytes of JSON allowed per record (two ids of 64 hex digits, names, quotes, spacing).
const BODY_BYTES_PER_CLAIM: u64 = 192;
/// Bytes of JSON allowed besides the records.
const BODY_BYTES_BASE: u64 = 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimsRequest {
    claims: Vec<Claim>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim {
    block: String,
    #[serde(default)]
    key: Option<String>,
}

#[derive(Serialize)]
struct Claimed {
    claimed: usize,
}

/// `POST /v1/operator/claims`.
pub(crate) async fn claim(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    app.operator.authorize(&headers, &app.tenancy)?;
    let fabric = app.fabric()?;
    let ns = app.tenancy.operator_namespace(&headers)?;
    let max_bytes = BODY_BYTES_BASE + BODY_BYTES_PER_CLAIM * CLAIMS_PER_REQUEST_MAX as u64;
    let deadline = Instant::now() + app.limits.body_read_timeout;
    let timeout_ms = app.limits.body_read_timeout.as_millis();
    let raw = read_bounded(body, max_bytes, deadline, timeout_ms).await?;
    let records = parse(&raw)?;
    fabric
        .claim_records(ns, &records)
        .await
        .map_err(ApiError::from_fabric)?;
    Ok(super::json(&Claimed {
        claimed: records.len(),
    }))
}

/// The records of a body, every id checked.
fn parse(raw: &[u8]) -> Result<Vec<(BlockId, Option<ChunkKey>)>, ApiError> {
    let req: ClaimsRequest =
        serde_json::from_slice(raw).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    if req.claims.is_empty() || req.claims.len() > CLAIMS_PER_REQUEST_MAX {
        return Err(ApiError::InvalidJson(format!(
            "claims: expected 1 to {CLAIMS_PER_REQUEST_MAX} records, found {}",
            req.claims.len()
        )));
    }
    req.claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let block = BlockId::from_hex(&c.block)
                .map_err(|e| ApiError::InvalidBlockId(format!("claims[{i}].block: {e}")))?;
            let key = c
                .key
                .as_deref()
                .map(ChunkKey::from_hex)
                .transpose()
                .map_err(|e| ApiError::InvalidChunkKey(format!("claims[{i}].key: {e}")))?;
            Ok((block, key))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn records_parse_with_and_without_a_key() {
        let body = format!(r#"{{"claims":[{{"block":"{H1}","key":"{H2}"}},{{"block":"{H2}"}}]}}"#);
        let r = parse(body.as_bytes()).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].0.to_hex(), H1);
        assert_eq!(r[0].1.map(|k| k.to_hex()).as_deref(), Some(H2));
        assert_eq!(r[1].0.to_hex(), H2);
        assert!(r[1].1.is_none());
    }

    #[test]
    fn bad_records_are_refused_with_what_was_wrong() {
        let cases = [
            (r#"{"claims":[]}"#.to_owned(), "invalid_json"),
            (
                r#"{"claims":[{"block":"xyz"}]}"#.to_owned(),
                "invalid_block_id",
            ),
            (
                format!(r#"{{"claims":[{{"block":"{H1}","key":"12"}}]}}"#),
                "invalid_chunk_key",
            ),
            (
                format!(r#"{{"claims":[{{"block":"{H1}","tier":"host"}}]}}"#),
                "invalid_json",
            ),
            ("not json".to_owned(), "invalid_json"),
        ];
        for (body, code) in cases {
            let e = parse(body.as_bytes()).expect_err(&body);
            assert_eq!(e.code(), code, "{body}");
        }
        let one = format!(r#"{{"block":"{H1}"}}"#);
        let many = vec![one; CLAIMS_PER_REQUEST_MAX + 1].join(",");
        let e = parse(format!(r#"{{"claims":[{many}]}}"#).as_bytes()).err();
        assert_eq!(e.map(|e| e.code()), Some("invalid_json"));
    }
}
