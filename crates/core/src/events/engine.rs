//! What an engine knows of a block it put ([`EngineBlock`]), and what the node knows of every
//! block it holds for its events ([`BlockInfo`]): the block's token count and, when the put
//! carried it, the engine's identity of the block — its page hashes (vLLM's
//! `ExternalBlockHash`, bytes or int), the parent hash, the token ids, the LoRA adapter and the
//! KV-cache group.
//!
//! Routers index blocks under the keys they compute for requests (vLLM's block hashes, or
//! hashes of the token ids as Dynamo does), so the node publishes these instead of its own
//! content ids whenever it has them. Everything here is bounded and checked against the
//! block's token count on the way in (HTTP headers, a peer's answer, the disk), so a decoded
//! record never makes an event that claims more tokens than the block holds.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Longest engine name (`vllm/0.33.0`).
pub const ENGINE_NAME_BYTES_MAX: usize = 64;
/// Longest bytes hash (vLLM's sha256 hashes are 32 bytes).
pub const ENGINE_HASH_BYTES_MAX: usize = 64;
/// Longest LoRA adapter name.
pub const LORA_NAME_BYTES_MAX: usize = 256;
/// Most tokens a block may carry ids for (the largest preset has 128).
pub const BLOCK_TOKENS_MAX: u32 = 4096;

/// vLLM's `KVCacheSpecKind` values (`vllm/v1/kv_cache_interface.py`, vLLM 0.33.0).
pub const KV_CACHE_SPEC_KINDS: [&str; 10] = [
    "full_attention",
    "mla_attention",
    "sliding_window",
    "sliding_window_mla",
    "mamba",
    "chunked_local_attention",
    "sink_full_attention",
    "encoder_only_attention",
    "cross_attention",
    "unknown",
];

/// One engine hash: vLLM's `ExternalBlockHash = bytes | int`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineHash {
    /// A bytes hash (vLLM's sha256 `BlockHash`).
    Bytes(Vec<u8>),
    /// An integer hash (what vLLM publishes by default), as its 64-bit value.
    Int(u64),
}

impl EngineHash {
    /// The 64-bit value published on the ZeroMQ wire: the integer itself, or for a bytes
    /// hash its low 64 bits read big-endian — what vLLM's `maybe_convert_block_hash` does
    /// with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1` (its default).
    pub fn wire(&self) -> u64 {
        match self {
            EngineHash::Int(v) => *v,
            EngineHash::Bytes(b) => low_u64_be(b),
        }
    }

    /// The hash as the SSE stream shows it: lowercase hex of the bytes, or the integer in
    /// decimal.
    pub fn display(&self) -> serde_json::Value {
        match self {
            EngineHash::Int(v) => serde_json::Value::from(*v),
            EngineHash::Bytes(b) => serde_json::Value::from(hex(b)),
        }
    }
}

/// The low 64 bits of `b` read as a big-endian integer (`int.from_bytes(b, "big") & (2**64-1)`).
pub fn low_u64_be(b: &[u8]) -> u64 {
    let tail = &b[b.len().saturating_sub(8)..];
    tail.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What an engine said of a block it put.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineBlock {
    /// The engine and its version (`vllm/0.33.0`).
    pub engine: String,
    /// The engine's hashes of the pages the block covers, in order (at least one).
    pub page_hashes: Vec<EngineHash>,
    /// The hash of the page before the first (none for a prompt's first block).
    pub parent: Option<EngineHash>,
    /// Tokens per engine page (per hash).
    pub page_tokens: u32,
    /// The block's token ids (empty when the engine did not send them).
    pub token_ids: Vec<u32>,
    /// The engine's LoRA id (vLLM's deprecated `lora_id`).
    pub lora_id: Option<i64>,
    /// The LoRA adapter's name (vLLM's `lora_name`, part of the block hash).
    pub lora_name: Option<String>,
    /// The engine's KV-cache group of the block (vLLM's `group_idx`).
    pub group_idx: Option<u32>,
    /// The group's kind (vLLM's `kv_cache_spec_kind`, one of [`KV_CACHE_SPEC_KINDS`]).
    pub kv_cache_spec_kind: Option<String>,
}

/// Why an [`EngineBlock`] does not fit its block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineBlockError {
    /// A field is out of its bounds or does not fit the block.
    #[error("{field}: expected {expected}, found {found}")]
    Field {
        /// The field (as the HTTP header names it, without the `kvfabric-engine-` prefix).
        field: &'static str,
        /// What fits.
        expected: String,
        /// What came.
        found: String,
    },
}

fn field(
    field: &'static str,
    expected: impl Into<String>,
    found: impl ToString,
) -> EngineBlockError {
    EngineBlockError::Field {
        field,
        expected: expected.into(),
        found: found.to_string(),
    }
}

impl EngineBlock {
    /// Checks every bound and that the record fits a block of `block_tokens` tokens: pages ×
    /// page tokens = block tokens, and token ids either absent or one per token.
    pub fn check(&self, block_tokens: u32) -> Result<(), EngineBlockError> {
        if self.engine.is_empty() || self.engine.len() > ENGINE_NAME_BYTES_MAX {
            return Err(field(
                "engine",
                format!("a name of 1 to {ENGINE_NAME_BYTES_MAX} bytes"),
                self.engine.len(),
            ));
        }
        let pages = self.page_hashes.len() as u64;
        if pages == 0 || pages > u64::from(block_tokens) {
            return Err(field(
                "block-hashes",
                format!("1 to {block_tokens} hashes"),
                pages,
            ));
        }
        for h in self.page_hashes.iter().chain(self.parent.iter()) {
            if let EngineHash::Bytes(b) = h {
                if b.is_empty() || b.len() > ENGINE_HASH_BYTES_MAX {
                    return Err(field(
                        "block-hashes",
                        format!("bytes hashes of 1 to {ENGINE_HASH_BYTES_MAX} bytes"),
                        b.len(),
                    ));
                }
            }
        }
        if pages * u64::from(self.page_tokens) != u64::from(block_tokens) {
            return Err(field(
                "page-tokens",
                format!("{block_tokens} / {pages} hashes (the block's tokens over its pages)"),
                self.page_tokens,
            ));
        }
        if !self.token_ids.is_empty() && self.token_ids.len() as u64 != u64::from(block_tokens) {
            return Err(field(
                "token-ids",
                format!("{block_tokens} token ids (one per token of the block)"),
                self.token_ids.len(),
            ));
        }
        if let Some(n) = &self.lora_name {
            if n.is_empty() || n.len() > LORA_NAME_BYTES_MAX {
                return Err(field(
                    "lora-name",
                    format!("a name of 1 to {LORA_NAME_BYTES_MAX} bytes"),
                    n.len(),
                ));
            }
        }
        if let Some(k) = &self.kv_cache_spec_kind {
            if !KV_CACHE_SPEC_KINDS.contains(&k.as_str()) {
                return Err(field(
                    "kv-cache-spec-kind",
                    format!("one of {}", KV_CACHE_SPEC_KINDS.join(", ")),
                    k.chars().take(40).collect::<String>(),
                ));
            }
        }
        Ok(())
    }
}

/// What the node knows of one held block for its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// Tokens in the block (its header's count).
    pub block_tokens: u32,
    /// The engine's identity of the block, when its put carried one.
    pub engine: Option<Arc<EngineBlock>>,
}

impl BlockInfo {
    /// A block known by its token count alone.
    pub fn tokens(block_tokens: u32) -> BlockInfo {
        BlockInfo {
            block_tokens,
            engine: None,
        }
    }

    /// Checks the token count's bound and the engine record against it.
    pub fn check(&self) -> Result<(), EngineBlockError> {
        if self.block_tokens == 0 || self.block_tokens > BLOCK_TOKENS_MAX {
            return Err(field(
                "tokens",
                format!("1 to {BLOCK_TOKENS_MAX} tokens"),
                self.block_tokens,
            ));
        }
        match &self.engine {
            Some(e) => e.check(self.block_tokens),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> EngineBlock {
        EngineBlock {
            engine: "vllm/0.33.0".into(),
            page_hashes: (1..=4).map(EngineHash::Int).collect(),
            parent: Some(EngineHash::Bytes(vec![9; 32])),
            page_tokens: 16,
            token_ids: (0..64).collect(),
            lora_id: None,
            lora_name: None,
            group_idx: Some(0),
            kv_cache_spec_kind: Some("mla_attention".into()),
        }
    }

    #[test]
    fn bytes_hashes_go_on_the_wire_as_vllm_converts_them() {
        // int.from_bytes(b, "big") & ((1 << 64) - 1)
        let mut b = vec![0xffu8; 24];
        b.extend(1u64.to_be_bytes());
        assert_eq!(EngineHash::Bytes(b).wire(), 1);
        assert_eq!(EngineHash::Bytes(vec![1, 2]).wire(), 0x0102);
        assert_eq!(EngineHash::Int(u64::MAX).wire(), u64::MAX);
    }

    #[test]
    fn a_record_must_fit_its_block() {
        assert_eq!(engine().check(64), Ok(()));
        let e = engine().check(128).unwrap_err();
        assert!(e.to_string().contains("page-tokens"), "{e}");
        let mut short = engine();
        short.token_ids.pop();
        assert!(short
            .check(64)
            .unwrap_err()
            .to_string()
            .contains("token-ids"));
        let mut none = engine();
        none.token_ids.clear();
        assert_eq!(none.check(64), Ok(()));
        let mut kind = engine();
        kind.kv_cache_spec_kind = Some("attention".into());
        assert!(kind.check(64).unwrap_err().to_string().contains("one of"));
        let mut long = engine();
        long.parent = Some(EngineHash::Bytes(vec![0; 65]));
        assert!(long.check(64).is_err());
        assert!(BlockInfo::tokens(0).check().is_err());
        assert_eq!(BlockInfo::tokens(64).check(), Ok(()));
    }
}
