//! Rotary position embedding of RoPE regions: the frequency ladders of the models' own RoPE
//! variants ([`RopeSpec`]) and the rotation of a block's RoPE dims ([`rotate_block`]).
//!
//! kvfabric stores `k_rope` canonical: every row as the engine had it before applying RoPE
//! (angle 0, no attention factor), so the same content has the same bytes wherever it sat.
//! Reading at position `p` rotates row `r` to `p + r * tokens_per_row` and scales it by the
//! model's attention factor, as the model's own rotary embedding does; a rotated put undoes
//! both. Frequencies follow the model's code:
//!
//! - plain: `theta^(-2i/d)`;
//! - YaRN (DeepSeek-V2/V3, Kimi K2, DeepSeek-V4's compressed layers): the plain frequency
//!   divided by `factor` below the correction range, kept above it, a linear ramp between
//!   (`floor`/`ceil` of the correction dims for `beta_fast`/`beta_slow`, as transformers'
//!   `_compute_yarn_parameters` with `truncate`); attention factor
//!   `mscale(factor, mscale) / mscale(factor, mscale_all_dim)` when both are given, else
//!   `mscale(factor, 1)`, unless set explicitly (DeepSeek-V4 sets 1);
//! - LongRoPE (MiniCPM3): the plain frequency divided by a per-pair factor. The model picks
//!   its long factors when the sequence is longer than `original_max_position` and its short
//!   ones otherwise (transformers' `longrope_frequency_update`, by the highest position in the
//!   forward). The fabric does not know a request's length, so it uses the shortest sequence
//!   that holds the block: a block whose last token sits at position `original_max_position`
//!   or beyond gets the long factors, any other the short ones. A prefill longer than the
//!   original context rotates its early keys with the long factors in the model; the fabric
//!   gives those blocks the short ones (for MiniCPM3-4B both sets are equal, so both agree).
//!
//! Arithmetic: frequencies, angles, cos and sin in f64 (exact to well below a bf16 ulp at any
//! position up to [`POSITION_MAX`]; the models compute their angles in f32, which at position
//! `P` is only good to about `P · 2^-24` rad), cast to f32; the rotation in f32 without fused
//! multiply-add; one rounding to the stored dtype (round-to-nearest-even).
//! `tests/rope_vectors.rs` pins every preset against the models' own transformers classes.

mod rotate;

use serde::Serialize;

pub use rotate::{load, rotate_block, store, Direction};

/// Largest first-token position the fabric rotates to (2^32 tokens).
pub const POSITION_MAX: u64 = 1 << 32;

/// How the dims of a rotary vector pair up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeConvention {
    /// Pairs `(i, i + d/2)`: GPT-NeoX / Hugging Face `rotate_half` (MiniCPM3, Llama).
    HalfSplit,
    /// Pairs `(2i, 2i + 1)`: the DeepSeek checkpoints' adjacent pairs, kept in the
    /// checkpoint's dim order (vLLM's cache, `is_neox_style=False`).
    Interleaved,
}

/// YaRN frequency interpolation, with the values of the model's `rope_scaling`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Yarn {
    /// Context extension factor.
    pub factor: f64,
    /// Context length the model was pre-trained at (`original_max_position_embeddings`).
    pub original_max_position: u64,
    /// Rotations above which dims extrapolate.
    pub beta_fast: f64,
    /// Rotations below which dims interpolate.
    pub beta_slow: f64,
    /// `mscale` (with `mscale_all_dim`, decides the attention factor).
    pub mscale: Option<f64>,
    /// `mscale_all_dim`.
    pub mscale_all_dim: Option<f64>,
    /// An explicit attention factor (overrides the mscale rule).
    pub attention_factor: Option<f64>,
}

/// LongRoPE per-pair factors, with the values of the model's `rope_scaling`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LongRope {
    /// Context length the model was pre-trained at (`original_max_position_embeddings`).
    pub original_max_position: u64,
    /// The model's `max_position_embeddings` (decides the default attention factor).
    pub max_position: u64,
    /// Divisors of each pair's frequency for sequences up to `original_max_position`.
    pub short_factors: Vec<f64>,
    /// Divisors for longer sequences.
    pub long_factors: Vec<f64>,
    /// An explicit attention factor (overrides the default rule).
    pub attention_factor: Option<f64>,
}

/// Frequency scaling applied on top of `theta`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeScaling {
    /// Plain `theta^(-2i/d)`.
    None,
    /// YaRN (DeepSeek-V2/V3, Kimi K2, DeepSeek-V4's compressed layers).
    Yarn(Yarn),
    /// LongRoPE (MiniCPM3).
    LongRope(LongRope),
}

/// The full RoPE specification of a rotary region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RopeSpec {
    /// Pairing convention.
    pub convention: RopeConvention,
    /// Base of the frequency ladder.
    pub theta: f64,
    /// Frequency scaling.
    pub scaling: RopeScaling,
}

/// YaRN's magnitude correction, as DeepSeek's and transformers' `get_mscale`.
fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

impl RopeSpec {
    /// Inverse frequency of each of the `dims / 2` pairs, in f64, for a sequence of
    /// `seq_len` tokens (only LongRoPE depends on it).
    pub fn inv_freq(&self, dims: u32, seq_len: u64) -> Vec<f64> {
        let half = (dims / 2) as usize;
        let d = f64::from(dims);
        let base: Vec<f64> = (0..half)
            .map(|i| 1.0 / self.theta.powf((2 * i) as f64 / d))
            .collect();
        match &self.scaling {
            RopeScaling::None => base,
            RopeScaling::LongRope(l) => {
                let factors = if seq_len > l.original_max_position {
                    &l.long_factors
                } else {
                    &l.short_factors
                };
                base.iter().zip(factors).map(|(b, f)| b / f).collect()
            }
            RopeScaling::Yarn(y) => {
                let correction = |rotations: f64| {
                    d * ((y.original_max_position as f64)
                        / (rotations * 2.0 * std::f64::consts::PI))
                        .ln()
                        / (2.0 * self.theta.ln())
                };
                let low = correction(y.beta_fast).floor().max(0.0);
                let high = correction(y.beta_slow).ceil().min(d - 1.0);
                let high = if low == high { high + 0.001 } else { high };
                base.iter()
                    .enumerate()
                    .map(|(i, extra)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp; // 1 = extrapolate (keep base frequency)
                        (extra / y.factor) * (1.0 - keep) + extra * keep
                    })
                    .collect()
            }
        }
    }

    /// The factor the model multiplies its cos and sin by (1 for plain RoPE).
    pub fn attention_factor(&self) -> f64 {
        match &self.scaling {
            RopeScaling::None => 1.0,
            RopeScaling::Yarn(y) => {
                y.attention_factor
                    .unwrap_or_else(|| match (y.mscale, y.mscale_all_dim) {
                        (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                            yarn_mscale(y.factor, m) / yarn_mscale(y.factor, all)
                        }
                        _ => yarn_mscale(y.factor, 1.0),
                    })
            }
            RopeScaling::LongRope(l) => l.attention_factor.unwrap_or_else(|| {
                let factor = l.max_position as f64 / l.original_max_position as f64;
                if factor <= 1.0 {
                    1.0
                } else {
                    (1.0 + factor.ln() / (l.original_max_position as f64).ln()).sqrt()
                }
            }),
        }
    }
}
