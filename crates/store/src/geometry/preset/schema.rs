//! The raw TOML schema of a preset: every field optional so that a missing key is reported
//! with its dotted path by the checks.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPreset {
    pub(super) model: Option<RawModel>,
    pub(super) mla: Option<RawMla>,
    pub(super) hybrid: Option<RawHybrid>,
    pub(super) gqa: Option<RawGqa>,
    pub(super) precision: Option<RawPrecision>,
    pub(super) rope: Option<RawRope>,
    pub(super) compressed_rope: Option<RawRope>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) name: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) layers: Option<u32>,
    pub(super) query_heads: Option<u32>,
    pub(super) block_tokens: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMla {
    pub(super) kv_lora_rank: Option<u32>,
    pub(super) rope_dim: Option<u32>,
    pub(super) mha_head_dim: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHybrid {
    pub(super) head_dim: Option<u32>,
    pub(super) rope_dim: Option<u32>,
    pub(super) indexer_dim: Option<u32>,
    pub(super) indexer_rope_dim: Option<u32>,
    pub(super) csa_compression: Option<u32>,
    pub(super) hca_compression: Option<u32>,
    pub(super) swa_window: Option<u32>,
    pub(super) layer_map: Option<Vec<RawRun>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub(super) count: Option<u32>,
    pub(super) schemes: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGqa {
    pub(super) kv_heads: Option<u32>,
    pub(super) head_dim: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrecision {
    pub(super) c_kv: Option<String>,
    pub(super) k_rope: Option<String>,
    pub(super) rope: Option<String>,
    pub(super) content: Option<String>,
    pub(super) indexer: Option<String>,
    pub(super) kv: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRope {
    pub(super) convention: Option<String>,
    pub(super) theta: Option<f64>,
    /// No longer accepted (replaced by `longrope`); kept so the error can say so.
    pub(super) factors: Option<Vec<f64>>,
    pub(super) yarn: Option<RawYarn>,
    pub(super) longrope: Option<RawLongRope>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawYarn {
    pub(super) factor: Option<f64>,
    pub(super) original_max_position: Option<u64>,
    pub(super) beta_fast: Option<f64>,
    pub(super) beta_slow: Option<f64>,
    pub(super) mscale: Option<f64>,
    pub(super) mscale_all_dim: Option<f64>,
    pub(super) attention_factor: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLongRope {
    pub(super) original_max_position: Option<u64>,
    pub(super) max_position: Option<u64>,
    pub(super) short_factors: Option<Vec<f64>>,
    pub(super) long_factors: Option<Vec<f64>>,
    pub(super) attention_factor: Option<f64>,
}
