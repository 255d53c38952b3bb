//! Model geometry: what a block holds, derived from the attention architecture.
//!
//! A [`ModelGeometry`] is parsed from a preset (`configs/models/*.toml`, see [`preset`]) and
//! decides everything about a block: its token count (64 for MLA, lcm(k1, k2) for the V4
//! hybrid), its per-layer regions with their own dtypes, and which regions carry RoPE.
//! Block size is a consequence of the geometry, never a knob; byte accounting is exact and
//! counted per block (per compressed group), never per token (see [`accounting`]).

pub mod accounting;
pub mod fingerprint;
pub mod layout;
pub mod preset;

use serde::Serialize;

use crate::dtype::Dtype;
use crate::rope::RopeSpec;

pub use layout::{BlockLayout, LayerLayout, RegionKind, RegionLayout};

/// Tokens per block for MLA models: what FlashMLA pages in.
pub const MLA_BLOCK_TOKENS: u32 = 64;
/// Tokens per block for the GQA/MHA comparison presets (vLLM's PagedAttention default).
pub const GQA_BLOCK_TOKENS: u32 = 16;

/// The attention architecture family of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Multi-head latent attention: a block holds `c_kv` and `k_rope`.
    Mla,
    /// DeepSeek-V4 per-layer hybrid (CSA / HCA / SWA).
    Hybrid,
    /// Grouped-query (or multi-head) attention; a comparison and accounting preset only.
    Gqa,
}

impl ModelKind {
    /// The lowercase name used in configs.
    pub const fn name(self) -> &'static str {
        match self {
            ModelKind::Mla => "mla",
            ModelKind::Hybrid => "hybrid",
            ModelKind::Gqa => "gqa",
        }
    }
}

/// The attention scheme of one layer of a hybrid model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerScheme {
    /// Compressed sparse attention: one entry per `csa_compression` tokens, with an indexer key.
    Csa,
    /// Heavily compressed attention: one entry per `hca_compression` tokens.
    Hca,
    /// Sliding-window attention only: nothing pages; lives in the per-request arena.
    Swa,
}

impl LayerScheme {
    /// The lowercase name used in configs.
    pub const fn name(self) -> &'static str {
        match self {
            LayerScheme::Csa => "csa",
            LayerScheme::Hca => "hca",
            LayerScheme::Swa => "swa",
        }
    }
}

/// MLA geometry: per layer, a latent of `kv_lora_rank` and a shared rotary key of `rope_dim`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MlaGeometry {
    /// Latent width (`kv_lora_rank`).
    pub kv_lora_rank: u32,
    /// Rotary key width (`qk_rope_head_dim`).
    pub rope_dim: u32,
    /// Dtype of the `c_kv` region.
    pub c_kv: Dtype,
    /// Dtype of the `k_rope` region.
    pub k_rope: Dtype,
    /// Head width used for the MHA-equivalent comparison (keys and values rebuilt per head).
    pub mha_head_dim: u32,
    /// RoPE of `k_rope`.
    pub rope: RopeSpec,
}

/// DeepSeek-V4 hybrid geometry: a scheme per layer and per-region precision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HybridGeometry {
    /// Width of one compressed entry (RoPE dims + content dims), 512 for V4-Pro.
    pub head_dim: u32,
    /// RoPE dims of an entry, stored in `rope_dtype`.
    pub rope_dim: u32,
    /// Width of the CSA indexer key, stored in `indexer_dtype`.
    pub indexer_dim: u32,
    /// Trailing dims of the indexer key that the model rotates (RoPE), 64 for V4.
    pub indexer_rope_dim: u32,
    /// CSA compression k1 (tokens per CSA entry).
    pub csa_compression: u32,
    /// HCA compression k2 (tokens per HCA entry).
    pub hca_compression: u32,
    /// Sliding window in tokens (every layer keeps one, in the per-request arena).
    pub swa_window: u32,
    /// Dtype of RoPE dims.
    pub rope_dtype: Dtype,
    /// Dtype of content (non-RoPE) dims.
    pub content_dtype: Dtype,
    /// Dtype of the CSA indexer key.
    pub indexer_dtype: Dtype,
    /// The scheme of every layer, in order.
    pub schemes: Vec<LayerScheme>,
    /// RoPE of the sliding-window-only layers (`rope_theta`, no scaling, for V4).
    pub rope: RopeSpec,
    /// RoPE of every row of a CSA or HCA layer: its compressed entries, its indexer keys and
    /// its window rows (`compress_rope_theta` with YaRN, for V4).
    pub compressed_rope: RopeSpec,
}

impl HybridGeometry {
    /// Content dims of an entry: `head_dim - rope_dim`.
    pub const fn content_dim(&self) -> u32 {
        self.head_dim - self.rope_dim
    }
}

/// GQA/MHA geometry, kept for byte-accounting comparisons.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GqaGeometry {
    /// Key-value heads.
    pub kv_heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// Dtype of keys and values.
    pub dtype: Dtype,
}

/// The attention-specific part of a geometry.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    /// Multi-head latent attention.
    Mla(MlaGeometry),
    /// DeepSeek-V4 hybrid.
    Hybrid(HybridGeometry),
    /// Grouped-query attention.
    Gqa(GqaGeometry),
}

/// A model's cache geometry, validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelGeometry {
    /// Preset name (as clients send it in `kvfabric-model`).
    pub name: String,
    /// Decoder layers.
    pub layers: u32,
    /// Query heads (for the MHA-equivalent comparison).
    pub query_heads: u32,
    /// The attention-specific part.
    pub attention: Attention,
}

impl ModelGeometry {
    /// The architecture family.
    pub fn kind(&self) -> ModelKind {
        match self.attention {
            Attention::Mla(_) => ModelKind::Mla,
            Attention::Hybrid(_) => ModelKind::Hybrid,
            Attention::Gqa(_) => ModelKind::Gqa,
        }
    }

    /// Tokens per block, derived from the geometry: 64 for MLA, lcm(k1, k2) for the hybrid.
    pub fn block_tokens(&self) -> u32 {
        match &self.attention {
            Attention::Mla(_) => MLA_BLOCK_TOKENS,
            Attention::Hybrid(h) => lcm(h.csa_compression, h.hca_compression),
            Attention::Gqa(_) => GQA_BLOCK_TOKENS,
        }
    }

    /// Whether blocks of this model can be sealed into the store (GQA presets cannot: kvfabric
    /// never stores expanded keys and values; those presets exist for accounting).
    pub fn is_storable(&self) -> bool {
        !matches!(self.attention, Attention::Gqa(_))
    }

    /// The byte layout of one block's payload.
    pub fn block_layout(&self) -> BlockLayout {
        layout::derive(self)
    }

    /// A 16-byte fingerprint of everything that decides a block's bytes and their meaning
    /// (see [`fingerprint`] for the canonical encoding it hashes).
    pub fn fingerprint(&self) -> [u8; 16] {
        fingerprint::fingerprint(self)
    }
}

/// Greatest common divisor.
pub(crate) const fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Least common multiple; 0 if either is 0.
pub(crate) const fn lcm(a: u32, b: u32) -> u32 {
    if a == 0 || b == 0 {
        0
    } else {
        a / gcd(a, b) * b
    }
}
