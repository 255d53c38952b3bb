//! Rotating a block's RoPE dims: one cos/sin table per distinct layer RoPE, the pairs of each
//! row turned in f32, one rounding to the stored dtype.

use crate::dtype::Dtype;
use crate::error::StoreError;
use crate::geometry::{BlockLayout, LayerLayout, RegionLayout};

use super::{RopeConvention, RopeSpec, POSITION_MAX};

/// Direction of a rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Rotate canonical rows to a position (reads).
    Forward,
    /// Undo a rotation at a position (rotated puts).
    Inverse,
}

/// Rotates every RoPE-carrying region of a block payload in place.
///
/// Row `r` of a layer turns by `(first_position + r * tokens_per_row) * inv_freq[i]` for pair
/// `i` and is scaled by the layer RoPE's attention factor; [`Direction::Inverse`] negates the
/// angle and divides by the factor. A LongRoPE layer uses the factor set of a sequence ending
/// with the block (see the [module docs](super)). Refuses, before touching a byte, a block
/// holding RoPE dims in a dtype that cannot be rotated ([`StoreError::PositionShiftUnsupported`]).
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
    layout.check_rotatable()?;
    let seq_len = first_position + u64::from(layout.block_tokens);
    // Layers with equal (rope, dims, rows, stride) share one cos/sin table.
    let mut cache: Option<(TableKey, Table)> = None;
    for (layer, region) in layout.rope_regions() {
        let Some(rope) = &layer.rope else { continue };
        if region.len == 0 {
            continue;
        }
        let key = TableKey::new(rope, region, layer);
        if cache.as_ref().map(|(k, _)| k != &key).unwrap_or(true) {
            let table = Table::new(&key, first_position, seq_len, direction);
            cache = Some((key, table));
        }
        let (_, table) = cache.as_ref().expect("table just built");
        let bytes = &mut payload[region.offset as usize..(region.offset + region.len) as usize];
        rotate_region(region, rope.convention, table, bytes);
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

impl TableKey {
    fn new(rope: &RopeSpec, region: &RegionLayout, layer: &LayerLayout) -> TableKey {
        TableKey {
            rope: rope.clone(),
            dims: region.rope_dims,
            rows: layer.rows,
            stride: layer.tokens_per_row,
        }
    }
}

/// cos and sin per (row, pair), scaled by the attention factor, already cast to f32.
struct Table {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Table {
    fn new(key: &TableKey, first_position: u64, seq_len: u64, direction: Direction) -> Table {
        let inv = key.rope.inv_freq(key.dims, seq_len);
        let half = inv.len();
        let factor = key.rope.attention_factor();
        let (sign, scale) = match direction {
            Direction::Forward => (1.0, factor),
            Direction::Inverse => (-1.0, 1.0 / factor),
        };
        let mut cos = Vec::with_capacity(half * key.rows as usize);
        let mut sin = Vec::with_capacity(half * key.rows as usize);
        for r in 0..u64::from(key.rows) {
            let pos = (first_position + r * u64::from(key.stride)) as f64;
            for f in &inv {
                let angle = sign * pos * f;
                cos.push((scale * angle.cos()) as f32);
                sin.push((scale * angle.sin()) as f32);
            }
        }
        Table { half, cos, sin }
    }
}

/// Turns the trailing `rope_dims` of every row of a rotatable region (checked by the caller).
fn rotate_region(
    region: &RegionLayout,
    convention: RopeConvention,
    table: &Table,
    bytes: &mut [u8],
) {
    let dtype = region.dtype;
    let width = (dtype.bits() / 8) as usize;
    let row_bytes = region.dims as usize * width;
    let first = (region.dims - region.rope_dims) as usize * width;
    let mut row = vec![0f32; region.rope_dims as usize];
    for (r, chunk) in bytes.chunks_exact_mut(row_bytes).enumerate() {
        let rope = &mut chunk[first..];
        for (i, v) in row.iter_mut().enumerate() {
            *v = load(dtype, &rope[i * width..(i + 1) * width]);
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
            store(dtype, *v, &mut rope[i * width..(i + 1) * width]);
        }
    }
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
