//! Parsing the API's request headers and query strings into typed values, each failure a
//! 400 naming the header and what was expected.

use axum::http::HeaderMap;
use kvfabric_store::rope::POSITION_MAX;
use kvfabric_store::BlockId;

use super::errors::ApiError;
use kvfabric_core::ChunkKey;

/// The model preset of a put.
pub(crate) const MODEL: &str = "kvfabric-model";
/// Tokens in a put's block.
pub(crate) const TOKENS: &str = "kvfabric-tokens";
/// First token's position of a rotated put.
pub(crate) const POSITION: &str = "kvfabric-position";
/// Chunk key of a put.
pub(crate) const CHUNK_KEY: &str = "kvfabric-chunk-key";
/// The position-independent chunk key a put also names its block by (optional).
pub(crate) const CHUNK_KEY_INDEPENDENT: &str = "kvfabric-chunk-key-independent";
/// Where a read was served from (`local` or a node id).
pub(crate) const SOURCE: &str = "kvfabric-source";
/// The tier a read was served from.
pub(crate) const TIER: &str = "kvfabric-tier";
/// The model of a block served (an extension of the contract).
pub(crate) const MODEL_OUT: &str = "kvfabric-model";

fn text<'a>(h: &'a HeaderMap, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim()))
            .map_err(|_| ApiError::InvalidHeader {
                name,
                reason: "expected visible ASCII".into(),
            }),
    }
}

/// A required text header.
pub(crate) fn required<'a>(h: &'a HeaderMap, name: &'static str) -> Result<&'a str, ApiError> {
    text(h, name)?.ok_or(ApiError::MissingHeader(name))
}

/// A non-negative decimal integer: ASCII digits only (no sign, no spaces), within `u64`.
pub(crate) fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn integer(name: &'static str, s: &str) -> Result<u64, ApiError> {
    decimal(s).ok_or_else(|| ApiError::InvalidHeader {
        name,
        reason: format!(
            "expected a non-negative integer, found {:?}",
            s.chars().take(40).collect::<String>()
        ),
    })
}

/// A required integer header.
pub(crate) fn required_u64(h: &HeaderMap, name: &'static str) -> Result<u64, ApiError> {
    integer(name, required(h, name)?)
}

/// An optional position header, within what the fabric rotates to.
pub(crate) fn position(h: &HeaderMap) -> Result<Option<u64>, ApiError> {
    text(h, POSITION)?
        .map(|s| integer(POSITION, s).and_then(checked_position))
        .transpose()
}

fn checked_position(p: u64) -> Result<u64, ApiError> {
    if p > POSITION_MAX {
        return Err(ApiError::PositionOutOfRange {
            position: p,
            max: POSITION_MAX,
        });
    }
    Ok(p)
}

/// An optional chunk-key header.
pub(crate) fn chunk_key(h: &HeaderMap) -> Result<Option<ChunkKey>, ApiError> {
    text(h, CHUNK_KEY)?
        .map(|s| {
            ChunkKey::from_hex(s)
                .map_err(|e| ApiError::InvalidChunkKey(format!("(header `{CHUNK_KEY}`): {e}")))
        })
        .transpose()
}

/// The optional `kvfabric-chunk-key-independent`.
pub(crate) fn chunk_key_independent(h: &HeaderMap) -> Result<Option<ChunkKey>, ApiError> {
    text(h, CHUNK_KEY_INDEPENDENT)?
        .map(|s| {
            ChunkKey::from_hex(s).map_err(|e| {
                ApiError::InvalidChunkKey(format!("(header `{CHUNK_KEY_INDEPENDENT}`): {e}"))
            })
        })
        .transpose()
}

/// The declared body length, if any.
pub(crate) fn content_length(h: &HeaderMap) -> Result<Option<u64>, ApiError> {
    text(h, "content-length")?
        .map(|s| integer("content-length", s))
        .transpose()
}

/// A block id from the path segment after `/v1/blocks/` (still percent-encoded: a valid id
/// has no escapes, so anything else is refused as it is).
pub(crate) fn block_id(path: &str) -> Result<BlockId, ApiError> {
    let raw = path.strip_prefix("/v1/blocks/").unwrap_or(path);
    BlockId::from_hex(raw).map_err(|e| ApiError::InvalidBlockId(e.to_string()))
}

/// What a read's query string asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReadQuery {
    /// `position`: rotate the block's RoPE dims so its first token sits there.
    pub(crate) position: Option<u64>,
    /// `variant`: which of this node's blocks under the id (0, the default, is the first
    /// sealed; more exist only after a dedup collision).
    pub(crate) variant: u32,
}

/// The `position` and `variant` of a read's query string, each at most once; any other
/// parameter is refused.
pub(crate) fn read_query(query: Option<&str>) -> Result<ReadQuery, ApiError> {
    let mut q = ReadQuery::default();
    let (mut position, mut variant) = (false, false);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let seen = match k {
            "position" => &mut position,
            "variant" => &mut variant,
            _ => {
                return Err(ApiError::InvalidQuery(format!(
                    "expected `position` or `variant`, found {:?}",
                    k.chars().take(40).collect::<String>()
                )))
            }
        };
        if std::mem::replace(seen, true) {
            return Err(ApiError::InvalidQuery(format!("`{k}` given twice")));
        }
        let bad = || {
            ApiError::InvalidQuery(format!(
                "{k}: expected a non-negative integer, found {:?}",
                v.chars().take(40).collect::<String>()
            ))
        };
        let n = decimal(v).ok_or_else(bad)?;
        if k == "position" {
            q.position = Some(checked_position(n)?);
        } else {
            q.variant = u32::try_from(n).map_err(|_| bad())?;
        }
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_ids_parse_strictly() {
        assert_eq!(read_query(None).unwrap(), ReadQuery::default());
        assert_eq!(read_query(Some("position=12")).unwrap().position, Some(12));
        let both = read_query(Some("variant=1&position=3")).unwrap();
        assert_eq!((both.position, both.variant), (Some(3), 1));
        for bad in [
            "position=-1",
            "pos=1",
            "variant=x",
            "variant=-1",
            "variant=1&variant=1",
            "position=1&position=2",
            // Digits only: Rust's integer parser takes a leading `+`, the contract does not.
            "position=+5",
            "variant=+1",
        ] {
            assert!(
                matches!(read_query(Some(bad)), Err(ApiError::InvalidQuery(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            read_query(Some("position=99999999999")),
            Err(ApiError::PositionOutOfRange { .. })
        ));
        let id = "0f".repeat(32);
        assert_eq!(block_id(&format!("/v1/blocks/{id}")).unwrap().to_hex(), id);
        assert!(block_id("/v1/blocks/zz").is_err());
        assert!(block_id(&format!("/v1/blocks/{id}%20")).is_err());
    }

    #[test]
    fn integers_are_digits_only() {
        assert_eq!(decimal("096"), Some(96));
        assert_eq!(decimal("18446744073709551615"), Some(u64::MAX));
        for bad in ["", "+5", "-0", " 5", "5 ", "18446744073709551616", "0x10"] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
        let mut h = HeaderMap::new();
        h.insert(TOKENS, "+64".parse().unwrap());
        assert!(matches!(
            required_u64(&h, TOKENS),
            Err(ApiError::InvalidHeader { name: TOKENS, .. })
        ));
    }
}
