//! Rotary position embedding of `k_rope` regions, in both conventions.
//!
//! kvfabric stores `k_rope` un-rotated (every row at angle 0) so the same content has the same
//! bytes wherever it sat. Reading at position `p` rotates row `r` by `(p + r * tokens_per_row)`
//! times each pair's frequency; a rotated put un-rotates with the negated angle.
//!
//! Arithmetic: angles, cos and sin in f64 (an f32 angle at position 1e5 is off by ~1 bf16 ulp),
//! cast to f32; the rotation itself in f32 without fused multiply-add; one rounding to the
//! stored dtype (round-to-nearest-even). That is what an engine does when it rotates itself.

use serde::Serialize;

use crate::dtype::Dtype;
use crate::error::StoreError;
use crate::geometry::{BlockLayout, RegionLayout};

/// Largest first-token position the fabric rotates to (2^32 tokens).
pub const POSITION_MAX: u64 = 1 << 32;

/// How the dims of a rotary vector pair up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeConvention {
    /// Pairs `(i, i + d/2)`: GPT-NeoX / Hugging Face `rotate_half` (MiniCPM3, Llama).
    HalfSplit,
    /// Pairs `(2i, 2i + 1)`: the original DeepSeek checkpoints (adjacent pairs).
    Interleaved,
}

/// Frequency scaling applied on top of `theta`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeScaling {
    /// Plain `theta^(-2i/d)`.
    None,
    /// YaRN frequency interpolation (DeepSeek-V2/V3); cos and sin are not rescaled
    /// (mscale = mscale_all_dim in those checkpoints, so the attention factor is 1).
    Yarn {
        /// Context extension factor.
        factor: f64,
        /// Context length the model was pre-trained at.
        original_max_position: u64,
        /// Rotations above which dims extrapolate.
        beta_fast: f64,
        /// Rotations below which dims interpolate.
        beta_slow: f64,
    },
    /// Explicit per-pair divisors of the inverse frequency (LongRoPE-style factors).
    Factors(Vec<f64>),
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

impl RopeSpec {
    /// Inverse frequency of each of the `dims / 2` pairs, in f64.
    pub fn inv_freq(&self, dims: u32) -> Vec<f64> {
        let half = (dims / 2) as usize;
        let d = f64::from(dims);
        let base: Vec<f64> = (0..half)
            .map(|i| 1.0 / self.theta.powf((2 * i) as f64 / d))
            .collect();
        match &self.scaling {
            RopeScaling::None => base,
            RopeScaling::Factors(f) => base.iter().zip(f).map(|(b, f)| b / f).collect(),
            RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
            } => {
                let correction = |rotations: f64| {
                    d * ((*original_max_position as f64) / (rotations * 2.0 * std::f64::consts::PI))
                        .ln()
                        / (2.0 * self.theta.ln())
                };
                let low = correction(*beta_fast).floor().max(0.0);
                let high = correction(*beta_slow).ceil().min(d - 1.0);
                let high = if low == high { high + 0.001 } else { high };
                base.iter()
                    .enumerate()
                    .map(|(i, extra)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp; // 1 = extrapolate (keep base frequency)
                        (extra / factor) * (1.0 - keep) + extra * keep
                    })
                    .collect()
            }
        }
    }
}

/// Direction of a rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Rotate canonical rows to a position (reads).
    Forward,
    /// Undo a rotation at a position (rotated puts).
    Inverse,
}

/// Rotates every rotary region of a block payload in place.
///
/// Row `r` of a layer turns by `(first_position + r * tokens_per_row) * inv_freq[i]` for pair
/// `i`, negated for [`Direction::Inverse`].
pub fn rotate_block(
    layout: &BlockLayout,
    payload: &mut [u8],
    first_position: u64,
    direction: Direction,
) -> Result<(), StoreError> {
    if first_position > POSITION_MAX {
        return Err(StoreError::PositionOutOfRange {
            position: first_position,
            max: POSITION_MAX,
        });
    }
    if payload.len() as u64 != layout.payload_len {
        return Err(StoreError::PayloadLength {
            expected: layout.payload_len,
            found: payload.len() as u64,
        });
    }
    // Layers with equal (rope, dims, rows, stride) share one cos/sin table.
    let mut cache: Option<(TableKey, Table)> = None;
    for (layer, region) in layout.rope_regions() {
        let Some(rope) = &layer.rope else { continue };
        if region.len == 0 {
            continue;
        }
        let key = TableKey {
            rope: rope.clone(),
            dims: region.dims,
            rows: layer.rows,
            stride: layer.tokens_per_row,
        };
        if cache.as_ref().map(|(k, _)| k != &key).unwrap_or(true) {
            let table = Table::new(&key, first_position, direction);
            cache = Some((key, table));
        }
        let (_, table) = cache.as_ref().expect("table just built");
        let bytes = &mut payload[region.offset as usize..(region.offset + region.len) as usize];
        rotate_region(region, rope.convention, table, bytes)?;
    }
    Ok(())
}

#[derive(Clone, PartialEq)]
struct TableKey {
    rope: RopeSpec,
    dims: u32,
    rows: u32,
    stride: u32,
}

/// cos and sin per (row, pair), already cast to f32.
struct Table {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Table {
    fn new(key: &TableKey, first_position: u64, direction: Direction) -> Table {
        let inv = key.rope.inv_freq(key.dims);
        let half = inv.len();
        let sign = match direction {
            Direction::Forward => 1.0,
            Direction::Inverse => -1.0,
        };
        let mut cos = Vec::with_capacity(half * key.rows as usize);
        let mut sin = Vec::with_capacity(half * key.rows as usize);
        for r in 0..u64::from(key.rows) {
            let pos = (first_position + r * u64::from(key.stride)) as f64;
            for f in &inv {
                let angle = sign * pos * f;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Table { half, cos, sin }
    }
}

fn rotate_region(
    region: &RegionLayout,
    convention: RopeConvention,
    table: &Table,
    bytes: &mut [u8],
) -> Result<(), StoreError> {
    let dtype = region.dtype;
    if !dtype.is_rotatable() {
        return Err(StoreError::NotRotatable { dtype });
    }
    let dims = region.dims as usize;
    let width = (dtype.bits() / 8) as usize;
    let row_bytes = dims * width;
    let mut row = vec![0f32; dims];
    for (r, chunk) in bytes.chunks_exact_mut(row_bytes).enumerate() {
        for (i, v) in row.iter_mut().enumerate() {
            *v = load(dtype, &chunk[i * width..(i + 1) * width]);
        }
        let cos = &table.cos[r * table.half..(r + 1) * table.half];
        let sin = &table.sin[r * table.half..(r + 1) * table.half];
        for i in 0..table.half {
            let (a, b) = match convention {
                RopeConvention::HalfSplit => (i, i + table.half),
                RopeConvention::Interleaved => (2 * i, 2 * i + 1),
            };
            let (x, y) = (row[a], row[b]);
            // Plain f32 products and sums (no FMA): the engine's arithmetic.
            row[a] = x * cos[i] - y * sin[i];
            row[b] = x * sin[i] + y * cos[i];
        }
        for (i, v) in row.iter().enumerate() {
            store(dtype, *v, &mut chunk[i * width..(i + 1) * width]);
        }
    }
    Ok(())
}

/// Reads one little-endian element of a rotatable dtype as f32.
pub fn load(dtype: Dtype, b: &[u8]) -> f32 {
    match dtype {
        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        Dtype::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        Dtype::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
        Dtype::Fp8 | Dtype::Fp4 => unreachable!("checked by is_rotatable"),
    }
}

/// Writes one f32 as a little-endian element of a rotatable dtype, rounding once (RNE).
pub fn store(dtype: Dtype, v: f32, out: &mut [u8]) {
    match dtype {
        Dtype::F32 => out.copy_from_slice(&v.to_le_bytes()),
        Dtype::Bf16 => out.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
        Dtype::F16 => out.copy_from_slice(&half::f16::from_f32(v).to_le_bytes()),
        Dtype::Fp8 | Dtype::Fp4 => unreachable!("checked by is_rotatable"),
    }
}
