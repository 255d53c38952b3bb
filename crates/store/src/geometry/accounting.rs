//! Exact byte accounting of a geometry, in integers.
//!
//! Owns: bytes per entry, per block and per context (whole blocks), the MHA-equivalent
//! comparison, the DeepSeek-V4 per-scheme figures, and a precision override for MLA.
//!
//! Everything is counted per block, or per compressed group (an *entry*), never per token: a
//! per-token figure is derived last, as an exact reduced [`Fraction`] of a block's bytes over
//! its tokens. That is why HCA comes out at 576 B per 128-token group = 9/2 B per token, not
//! the 4 B a per-token integer division would print. No floating point is used here.

use super::{lcm, Attention, HybridGeometry, LayerScheme, ModelGeometry};
use crate::dtype::Dtype;
use crate::error::ConfigError;
use crate::geometry::preset::Check;
use crate::units::{ByteCount, TokenCount};

/// A non-negative rational number `num / den`, always reduced, `den >= 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fraction {
    num: u64,
    den: u64,
}

impl Fraction {
    /// `num / den` reduced; `None` if `den` is 0.
    pub const fn new(num: u64, den: u64) -> Option<Fraction> {
        if den == 0 {
            return None;
        }
        let g = gcd64(num, den);
        Some(Fraction {
            num: num / g,
            den: den / g,
        })
    }

    /// The whole number `n`.
    pub const fn from_integer(n: u64) -> Fraction {
        Fraction { num: n, den: 1 }
    }

    /// Numerator (reduced).
    pub const fn num(self) -> u64 {
        self.num
    }

    /// Denominator (reduced, at least 1).
    pub const fn den(self) -> u64 {
        self.den
    }

    /// The value if it is a whole number.
    pub const fn to_integer(self) -> Option<u64> {
        if self.den == 1 {
            Some(self.num)
        } else {
            None
        }
    }

    /// The value rounded down.
    pub const fn floor(self) -> u64 {
        self.num / self.den
    }

    /// The nearest `f64` (correctly rounded when `num` and `den` are below 2^53).
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl std::fmt::Display for Fraction {
    /// `"160"` for whole numbers, `"9/2"` otherwise.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

const fn gcd64(a: u64, b: u64) -> u64 {
    if b == 0 {
        if a == 0 {
            1
        } else {
            a
        }
    } else {
        gcd64(b, a % b)
    }
}

/// The cost of one layer's rows, counted per entry and per block.
///
/// An entry is one stored row: a token for MLA and GQA, a compressed group of
/// `tokens_per_entry` tokens for CSA and HCA, a token for SWA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryCost {
    /// Tokens one entry covers (the compression; 1 when uncompressed).
    pub tokens_per_entry: u32,
    /// Bytes of one entry, all regions.
    pub bytes_per_entry: ByteCount,
    /// Entries in one block of the geometry's block size.
    pub entries_per_block: u32,
}

impl EntryCost {
    /// Bytes per block: `entries_per_block × bytes_per_entry`.
    pub fn bytes_per_block(&self) -> ByteCount {
        ByteCount(u64::from(self.entries_per_block) * self.bytes_per_entry.0)
    }

    /// Bytes per token, exact: `bytes_per_entry / tokens_per_entry`.
    pub fn bytes_per_token(&self) -> Fraction {
        Fraction::new(self.bytes_per_entry.0, u64::from(self.tokens_per_entry))
            .expect("validated geometries have tokens_per_entry >= 1")
    }
}

/// Bytes of `dims` elements of `dtype` (whole: validation rejects partial bytes).
fn region_bytes(dims: u32, dtype: Dtype) -> u64 {
    u64::from(dims) * dtype.bits() / 8
}

/// Bytes of `heads × head_dim` elements of `dtype`, multiplied in u64.
fn heads_bytes(heads: u32, head_dim: u32, dtype: Dtype) -> u64 {
    u64::from(heads) * u64::from(head_dim) * dtype.bits() / 8
}

/// The per-layer cost of an MLA or GQA geometry (every layer costs the same); `None` for the
/// hybrid, whose cost is per scheme (see [`scheme_cost`]).
pub fn layer_cost(g: &ModelGeometry) -> Option<EntryCost> {
    let bytes_per_entry = match &g.attention {
        Attention::Mla(m) => {
            region_bytes(m.kv_lora_rank, m.c_kv) + region_bytes(m.rope_dim, m.k_rope)
        }
        Attention::Gqa(q) => 2 * heads_bytes(q.kv_heads, q.head_dim, q.dtype),
        Attention::Hybrid(_) => return None,
    };
    Some(EntryCost {
        tokens_per_entry: 1,
        bytes_per_entry: ByteCount(bytes_per_entry),
        entries_per_block: g.block_tokens(),
    })
}

/// The per-layer cost of one scheme of a hybrid geometry, per block of lcm(k1, k2) tokens.
///
/// CSA: an entry is RoPE + content + indexer key per k1 tokens. HCA: RoPE + content per k2
/// tokens. SWA: RoPE + content per token, uncompressed; SWA rows never enter a block (they live
/// in the per-request arena, bounded by the window), so its "per block" figures are the rate at
/// which rows accrue per block of context, for comparison — [`block_bytes`] does not count them.
pub fn scheme_cost(h: &HybridGeometry, scheme: LayerScheme) -> EntryCost {
    let block = lcm(h.csa_compression, h.hca_compression);
    let row =
        region_bytes(h.rope_dim, h.rope_dtype) + region_bytes(h.content_dim(), h.content_dtype);
    let (tokens_per_entry, bytes_per_entry) = match scheme {
        LayerScheme::Csa => (
            h.csa_compression,
            row + region_bytes(h.indexer_dim, h.indexer_dtype),
        ),
        LayerScheme::Hca => (h.hca_compression, row),
        LayerScheme::Swa => (1, row),
    };
    EntryCost {
        tokens_per_entry,
        bytes_per_entry: ByteCount(bytes_per_entry),
        entries_per_block: block / tokens_per_entry,
    }
}

/// Bytes of one block's payload, all layers (for the hybrid: CSA and HCA layers only).
///
/// Computed arithmetically; equals `g.block_layout().payload_len` (tests hold the two to it).
pub fn block_bytes(g: &ModelGeometry) -> ByteCount {
    match &g.attention {
        Attention::Hybrid(h) => ByteCount(
            h.schemes
                .iter()
                .filter(|s| **s != LayerScheme::Swa)
                .map(|s| scheme_cost(h, *s).bytes_per_block().0)
                .sum(),
        ),
        _ => {
            let cost = layer_cost(g).expect("mla and gqa have a uniform layer cost");
            ByteCount(u64::from(g.layers) * cost.bytes_per_block().0)
        }
    }
}

/// Bytes per token over all layers, exact: `block_bytes / block_tokens`, reduced. A whole
/// number for MLA and GQA presets; for the hybrid, the paged (CSA + HCA) part only.
pub fn bytes_per_token(g: &ModelGeometry) -> Fraction {
    Fraction::new(block_bytes(g).0, u64::from(g.block_tokens()))
        .expect("validated geometries have block_tokens >= 1")
}

/// Blocks needed to hold `tokens` (the last one may be partly filled).
pub fn blocks_for(g: &ModelGeometry, tokens: TokenCount) -> u64 {
    tokens.0.div_ceil(u64::from(g.block_tokens()))
}

/// Bytes to hold a context of `tokens`, in whole blocks; `None` if it exceeds `u64`.
pub fn context_bytes(g: &ModelGeometry, tokens: TokenCount) -> Option<ByteCount> {
    blocks_for(g, tokens)
        .checked_mul(block_bytes(g).0)
        .map(ByteCount)
}

/// How many contexts of `tokens` fit whole in `budget` bytes; `None` if a context exceeds `u64`
/// or is empty.
pub fn contexts_in(g: &ModelGeometry, tokens: TokenCount, budget: ByteCount) -> Option<u64> {
    let each = context_bytes(g, tokens)?;
    budget.0.checked_div(each.0)
}

/// Bytes per token of the same model with every query head's key and value rebuilt and stored
/// in `dtype` (plain MHA): `2 × layers × query_heads × head_dim × width`, with head_dim the
/// MLA preset's `mha_head_dim` or the GQA preset's `head_dim`. `None` for the hybrid.
pub fn mha_bytes_per_token(g: &ModelGeometry, dtype: Dtype) -> Option<ByteCount> {
    let head_dim = match &g.attention {
        Attention::Mla(m) => m.mha_head_dim,
        Attention::Gqa(q) => q.head_dim,
        Attention::Hybrid(_) => return None,
    };
    let per_layer = 2 * heads_bytes(g.query_heads, head_dim, dtype);
    Some(ByteCount(u64::from(g.layers) * per_layer))
}

/// MHA-equivalent bytes of a context of `tokens`, in whole blocks of the geometry's block size
/// (the same granularity as [`context_bytes`]); `None` for the hybrid or past `u64`.
pub fn mha_context_bytes(g: &ModelGeometry, tokens: TokenCount, dtype: Dtype) -> Option<ByteCount> {
    let block_tokens = u64::from(g.block_tokens());
    let per_block = mha_bytes_per_token(g, dtype)?.0.checked_mul(block_tokens)?;
    blocks_for(g, tokens).checked_mul(per_block).map(ByteCount)
}

/// How many times smaller the stored cache is than the MHA equivalent in `dtype`, exact:
/// `mha_bytes_per_token / bytes_per_token` (512/9 for DeepSeek-V3 in BF16). `None` for the
/// hybrid.
pub fn mha_ratio(g: &ModelGeometry, dtype: Dtype) -> Option<Fraction> {
    let mha = mha_bytes_per_token(g, dtype)?.0;
    let stored = bytes_per_token(g);
    // (mha / 1) / (num / den) = mha * den / num
    Fraction::new(mha.checked_mul(stored.den())?, stored.num())
}

/// The same MLA geometry with its regions stored in other dtypes, for accounting (e.g.
/// `c_kv = fp8, k_rope = bf16`, DeepSeek-V3's FP8 layout at 640 B per token per layer).
///
/// Validated like a preset: `k_rope` must be rotatable and rows whole bytes. Errors name the
/// file `<override>/NAME` and the key `precision.c_kv` / `precision.k_rope`; a geometry that
/// is not MLA is rejected under the key `model.kind`.
pub fn with_mla_precision(
    g: &ModelGeometry,
    c_kv: Dtype,
    k_rope: Dtype,
) -> Result<ModelGeometry, ConfigError> {
    let file = format!("<override>/{}", g.name);
    let check = Check { file: &file };
    let mut out = g.clone();
    let Attention::Mla(m) = &mut out.attention else {
        return Err(check.err(
            "model.kind",
            format!(
                "a precision override for mla was given a {} geometry",
                g.kind().name()
            ),
        ));
    };
    check.mla_precision(m.kv_lora_rank, m.rope_dim, c_kv, k_rope)?;
    m.c_kv = c_kv;
    m.k_rope = k_rope;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_reduce_and_print() {
        let f = Fraction::new(576, 128).unwrap();
        assert_eq!((f.num(), f.den()), (9, 2));
        assert_eq!(f.to_string(), "9/2");
        assert_eq!(f.to_f64(), 4.5);
        assert_eq!(f.floor(), 4);
        assert_eq!(f.to_integer(), None);
        assert_eq!(Fraction::new(20480, 128).unwrap().to_string(), "160");
        assert_eq!(Fraction::new(0, 7).unwrap(), Fraction::from_integer(0));
        assert_eq!(Fraction::new(1, 0), None);
    }
}
