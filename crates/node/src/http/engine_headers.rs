//! The engine metadata headers of a put (`kvfabric-engine-*`, docs/API.md "Engine metadata
//! of a put") parsed into an [`EngineBlock`] and checked against the model's block, before
//! any byte of the body is read. Every failure is a 400 naming the header and what was
//! expected.
//!
//! A hash is lowercase hex for a bytes hash (vLLM's sha256 `BlockHash`) or `i:` and a decimal
//! integer for an integer hash (negative values, as some engines publish signed 64-bit
//! hashes, are taken as their two's-complement 64-bit value).

use std::sync::Arc;

use axum::http::HeaderMap;
use kvfabric_core::events::engine::{EngineBlock, EngineHash, ENGINE_HASH_BYTES_MAX};
use kvfabric_store::{ModelGeometry, ModelKind};

use super::errors::ApiError;

/// The engine and its version.
pub(crate) const ENGINE: &str = "kvfabric-engine";
/// The engine's page hashes, comma-separated.
pub(crate) const BLOCK_HASHES: &str = "kvfabric-engine-block-hashes";
/// The hash of the page before the block.
pub(crate) const PARENT_HASH: &str = "kvfabric-engine-parent-hash";
/// Tokens per engine page.
pub(crate) const PAGE_TOKENS: &str = "kvfabric-engine-page-tokens";
/// The block's token ids, comma-separated decimal.
pub(crate) const TOKEN_IDS: &str = "kvfabric-engine-token-ids";
/// The engine's LoRA id.
pub(crate) const LORA_ID: &str = "kvfabric-engine-lora-id";
/// The LoRA adapter's name.
pub(crate) const LORA_NAME: &str = "kvfabric-engine-lora-name";
/// The engine's KV-cache group of the block.
pub(crate) const GROUP_IDX: &str = "kvfabric-engine-group-idx";
/// That group's kind.
pub(crate) const KV_CACHE_SPEC_KIND: &str = "kvfabric-engine-kv-cache-spec-kind";

pub(crate) const ALL: [&str; 9] = [
    ENGINE,
    BLOCK_HASHES,
    PARENT_HASH,
    PAGE_TOKENS,
    TOKEN_IDS,
    LORA_ID,
    LORA_NAME,
    GROUP_IDX,
    KV_CACHE_SPEC_KIND,
];

fn invalid(name: &'static str, reason: impl Into<String>) -> ApiError {
    ApiError::InvalidHeader {
        name,
        reason: reason.into(),
    }
}

fn text<'a>(h: &'a HeaderMap, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    h.get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| invalid(name, "expected visible ASCII"))
        })
        .transpose()
}

fn shown(s: &str) -> String {
    s.chars().take(40).collect()
}

/// One hash: hex bytes, or `i:` and a decimal integer.
fn hash(name: &'static str, s: &str) -> Result<EngineHash, ApiError> {
    if let Some(n) = s.strip_prefix("i:") {
        let v = n
            .parse::<u64>()
            .or_else(|_| n.parse::<i64>().map(|v| v as u64))
            .map_err(|_| {
                invalid(
                    name,
                    format!("expected i:INTEGER (64-bit), found {:?}", shown(s)),
                )
            })?;
        return Ok(EngineHash::Int(v));
    }
    let ok = !s.is_empty()
        && s.len().is_multiple_of(2)
        && s.len() <= 2 * ENGINE_HASH_BYTES_MAX
        && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !ok {
        return Err(invalid(
            name,
            format!(
                "expected a bytes hash as 2 to {} hex digits or i:INTEGER, found {:?}",
                2 * ENGINE_HASH_BYTES_MAX,
                shown(s)
            ),
        ));
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("checked hex"))
        .collect();
    Ok(EngineHash::Bytes(bytes))
}

fn list<'a>(s: &'a str, max: usize, name: &'static str) -> Result<Vec<&'a str>, ApiError> {
    let items: Vec<&str> = s.split(',').map(str::trim).collect();
    if items.len() > max {
        return Err(invalid(
            name,
            format!("expected at most {max} items, found {}", items.len()),
        ));
    }
    Ok(items)
}

fn number<T: std::str::FromStr>(name: &'static str, s: &str, what: &str) -> Result<T, ApiError> {
    s.parse()
        .map_err(|_| invalid(name, format!("expected {what}, found {:?}", shown(s))))
}

/// The kind a group of `geometry`'s blocks has when the engine does not say.
fn default_kind(geometry: &ModelGeometry) -> Option<String> {
    match geometry.kind() {
        ModelKind::Mla => Some("mla_attention".into()),
        ModelKind::Gqa => Some("full_attention".into()),
        // A V4 hybrid block spans several of an engine's groups: only the engine knows.
        ModelKind::Hybrid => None,
    }
}

/// The put's engine identity, if it sent one, checked against a block of `geometry`.
pub(crate) fn engine_block(
    h: &HeaderMap,
    geometry: &ModelGeometry,
) -> Result<Option<Arc<EngineBlock>>, ApiError> {
    let Some(engine) = text(h, ENGINE)? else {
        if let Some(other) = ALL.iter().find(|n| h.contains_key(**n)) {
            return Err(invalid(
                other,
                format!("engine metadata needs `{ENGINE}` (the engine and its version) too"),
            ));
        }
        return Ok(None);
    };
    let block_tokens = geometry.block_tokens();
    let max = block_tokens as usize;
    let hashes = text(h, BLOCK_HASHES)?.ok_or(ApiError::MissingHeader(BLOCK_HASHES))?;
    let page_hashes = list(hashes, max, BLOCK_HASHES)?
        .into_iter()
        .map(|s| hash(BLOCK_HASHES, s))
        .collect::<Result<Vec<_>, _>>()?;
    let parent = text(h, PARENT_HASH)?
        .map(|s| hash(PARENT_HASH, s))
        .transpose()?;
    let page_tokens = number(
        PAGE_TOKENS,
        text(h, PAGE_TOKENS)?.ok_or(ApiError::MissingHeader(PAGE_TOKENS))?,
        "tokens per engine page",
    )?;
    let token_ids = match text(h, TOKEN_IDS)? {
        None => Vec::new(),
        Some(s) => list(s, max, TOKEN_IDS)?
            .into_iter()
            .map(|t| number::<u32>(TOKEN_IDS, t, "a token id (0 to 4294967295)"))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let lora_id = text(h, LORA_ID)?
        .map(|s| number::<i64>(LORA_ID, s, "a 64-bit integer"))
        .transpose()?;
    let lora_name = text(h, LORA_NAME)?.map(str::to_owned);
    let group_idx = text(h, GROUP_IDX)?
        .map(|s| number::<u32>(GROUP_IDX, s, "a group index"))
        .transpose()?;
    let kv_cache_spec_kind = match text(h, KV_CACHE_SPEC_KIND)? {
        Some(k) => Some(k.to_owned()),
        None => default_kind(geometry),
    };
    let e = EngineBlock {
        engine: engine.to_owned(),
        page_hashes,
        parent,
        page_tokens,
        token_ids,
        lora_id,
        lora_name,
        group_idx: group_idx.or(Some(0)),
        kv_cache_spec_kind,
    };
    e.check(block_tokens).map_err(|err| {
        let kvfabric_core::events::engine::EngineBlockError::Field { field, .. } = &err;
        let name = ALL
            .iter()
            .find(|n| n.ends_with(field))
            .copied()
            .unwrap_or(ENGINE);
        invalid(name, err.to_string())
    })?;
    Ok(Some(Arc::new(e)))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use kvfabric_test_support::presets::tiny;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn tokens(n: u32) -> String {
        (0..n).map(|t| t.to_string()).collect::<Vec<_>>().join(",")
    }

    #[test]
    fn the_headers_give_the_engine_identity_and_bad_ones_name_their_header() {
        let g = tiny();
        let n = g.block_tokens();
        assert_eq!(engine_block(&HeaderMap::new(), &g).unwrap(), None);
        let ids = tokens(n);
        let quarter = (n / 4).to_string();
        let h = headers(&[
            (ENGINE, "vllm/0.33.0"),
            (BLOCK_HASHES, "i:1,i:-1,0a0b,i:18446744073709551615"),
            (PARENT_HASH, "ff"),
            (PAGE_TOKENS, &quarter),
            (TOKEN_IDS, &ids),
            (LORA_NAME, "adapter"),
        ]);
        let e = engine_block(&h, &g).unwrap().unwrap();
        assert_eq!(
            e.page_hashes,
            [
                EngineHash::Int(1),
                EngineHash::Int(u64::MAX),
                EngineHash::Bytes(vec![10, 11]),
                EngineHash::Int(u64::MAX)
            ]
        );
        assert_eq!(e.parent, Some(EngineHash::Bytes(vec![255])));
        assert_eq!(e.token_ids.len(), n as usize);
        assert_eq!(e.group_idx, Some(0));
        assert_eq!(e.kv_cache_spec_kind.as_deref(), Some("mla_attention"));

        let cases: [(&[(&'static str, &str)], &str); 6] = [
            (&[(TOKEN_IDS, "1,2")], TOKEN_IDS),
            (&[(ENGINE, "vllm"), (PAGE_TOKENS, "16")], BLOCK_HASHES),
            (
                &[(ENGINE, "vllm"), (BLOCK_HASHES, "xyz"), (PAGE_TOKENS, "16")],
                BLOCK_HASHES,
            ),
            (
                &[(ENGINE, "vllm"), (BLOCK_HASHES, "i:1"), (PAGE_TOKENS, "16")],
                PAGE_TOKENS,
            ),
            (
                &[
                    (ENGINE, "vllm"),
                    (BLOCK_HASHES, "i:1"),
                    (PAGE_TOKENS, "64"),
                    (TOKEN_IDS, "1,2,3"),
                ],
                TOKEN_IDS,
            ),
            (
                &[
                    (ENGINE, "vllm"),
                    (BLOCK_HASHES, "i:1"),
                    (PAGE_TOKENS, "64"),
                    (KV_CACHE_SPEC_KIND, "attention"),
                ],
                KV_CACHE_SPEC_KIND,
            ),
        ];
        for (pairs, name) in cases {
            match engine_block(&headers(pairs), &g) {
                Err(ApiError::InvalidHeader { name: got, reason }) => {
                    assert_eq!(got, name, "{pairs:?}: {reason}")
                }
                Err(ApiError::MissingHeader(got)) => assert_eq!(got, name, "{pairs:?}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }
}
