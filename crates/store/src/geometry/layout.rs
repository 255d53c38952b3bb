//! The byte layout of a block payload, derived from a geometry.
//!
//! Layer-major. Inside a layer, region-major: every row of the first region, then every row of
//! the next. For MLA a row is a token and the regions are `c_kv` then `k_rope`; for a hybrid
//! CSA layer a row is one compressed entry (k1 tokens) with regions RoPE, content and indexer;
//! for an HCA layer one entry per k2 tokens with RoPE and content. SWA layers hold nothing in a
//! block (their rows live in the per-request arena). Multi-byte values are little-endian.
//!
//! A compressed entry's RoPE region is the entry's trailing `rope_dim` dims (DeepSeek-V4 lays a
//! head out as `[content | rope]`), its content region the leading ones; a CSA indexer key is
//! stored whole, its trailing `indexer_rope_dim` dims being the ones the model rotates.

use super::{Attention, LayerScheme, ModelGeometry};
use crate::dtype::Dtype;
use crate::error::StoreError;
use crate::rope::RopeSpec;

/// What a region holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// MLA compressed latent `c_kv`.
    Latent,
    /// Rotary key dims (`k_rope`, or the RoPE dims of a compressed entry).
    Rope,
    /// Non-rotary content dims of a compressed entry.
    Content,
    /// CSA lightning-indexer key.
    Indexer,
    /// GQA keys (accounting only).
    Key,
    /// GQA values (accounting only).
    Value,
}

impl RegionKind {
    /// The lowercase name used in errors and the API.
    pub const fn name(self) -> &'static str {
        match self {
            RegionKind::Latent => "c_kv",
            RegionKind::Rope => "rope",
            RegionKind::Content => "content",
            RegionKind::Indexer => "indexer",
            RegionKind::Key => "key",
            RegionKind::Value => "value",
        }
    }
}

/// One region of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionLayout {
    /// What the region holds.
    pub kind: RegionKind,
    /// Element type.
    pub dtype: Dtype,
    /// Elements per row.
    pub dims: u32,
    /// Byte offset from the start of the payload.
    pub offset: u64,
    /// Byte length (`rows * dims * bits / 8`).
    pub len: u64,
    /// How many of each row's dims, at its end, the model rotates (all of a `Rope` region, the
    /// trailing RoPE dims of a CSA indexer key, 0 elsewhere).
    pub rope_dims: u32,
}

impl RegionLayout {
    /// Bytes per row.
    pub fn row_bytes(&self) -> u64 {
        u64::from(self.dims) * self.dtype.bits() / 8
    }
}

/// One layer's slice of a block.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerLayout {
    /// Hybrid scheme of the layer (`None` for MLA and GQA).
    pub scheme: Option<LayerScheme>,
    /// Rows of this layer in one block.
    pub rows: u32,
    /// Tokens covered by one row (1 for MLA, the compression for hybrid entries).
    pub tokens_per_row: u32,
    /// Regions in payload order.
    pub regions: Vec<RegionLayout>,
    /// RoPE applied to this layer's `Rope` region, if it has one.
    pub rope: Option<RopeSpec>,
}

impl LayerLayout {
    /// Bytes of this layer in one block.
    pub fn len(&self) -> u64 {
        self.regions.iter().map(|r| r.len).sum()
    }

    /// Whether the layer holds no bytes in a block (SWA layers).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The whole payload layout of one block.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockLayout {
    /// Tokens per block.
    pub block_tokens: u32,
    /// Layers in order.
    pub layers: Vec<LayerLayout>,
    /// Total payload bytes.
    pub payload_len: u64,
}

impl BlockLayout {
    /// Every region holding RoPE dims, with its layer (RoPE and row stride), in payload order.
    pub fn rope_regions(&self) -> impl Iterator<Item = (&LayerLayout, &RegionLayout)> {
        self.layers.iter().flat_map(|l| {
            l.regions
                .iter()
                .filter(|r| r.rope_dims > 0)
                .map(move |r| (l, r))
        })
    }

    /// Whether a block of this layout can be read at another position: every region holding
    /// RoPE dims must be of a dtype the fabric can rotate. Refused with the first layer and
    /// region that cannot, and why.
    pub fn check_rotatable(&self) -> Result<(), StoreError> {
        for (index, layer) in self.layers.iter().enumerate() {
            if let Some(r) = layer
                .regions
                .iter()
                .find(|r| r.rope_dims > 0 && !r.dtype.is_rotatable())
            {
                return Err(StoreError::PositionShiftUnsupported {
                    layer: index as u32,
                    region: r.kind.name(),
                    reason: format!(
                        "{} of its {} dims are RoPE dims the model rotated before storing them as {}, \
                         and {} values cannot be re-rotated exactly; put and read its blocks without a position",
                        r.rope_dims, r.dims, r.dtype, r.dtype
                    ),
                });
            }
        }
        Ok(())
    }

    /// Number of regions across all layers.
    pub fn region_count(&self) -> u32 {
        self.layers.iter().map(|l| l.regions.len() as u32).sum()
    }
}

struct Builder {
    offset: u64,
    layers: Vec<LayerLayout>,
}

impl Builder {
    fn layer(
        &mut self,
        scheme: Option<LayerScheme>,
        rows: u32,
        tokens_per_row: u32,
        rope: Option<RopeSpec>,
        regions: &[(RegionKind, Dtype, u32, u32)],
    ) {
        let mut out = Vec::with_capacity(regions.len());
        for &(kind, dtype, dims, rope_dims) in regions {
            let len = u64::from(rows) * u64::from(dims) * dtype.bits() / 8;
            out.push(RegionLayout {
                kind,
                dtype,
                dims,
                offset: self.offset,
                len,
                rope_dims,
            });
            self.offset += len;
        }
        self.layers.push(LayerLayout {
            scheme,
            rows,
            tokens_per_row,
            regions: out,
            rope,
        });
    }
}

pub(super) fn derive(g: &ModelGeometry) -> BlockLayout {
    let block_tokens = g.block_tokens();
    let mut b = Builder {
        offset: 0,
        layers: Vec::with_capacity(g.layers as usize),
    };
    match &g.attention {
        Attention::Mla(m) => {
            for _ in 0..g.layers {
                b.layer(
                    None,
                    block_tokens,
                    1,
                    Some(m.rope.clone()),
                    &[
                        (RegionKind::Latent, m.c_kv, m.kv_lora_rank, 0),
                        (RegionKind::Rope, m.k_rope, m.rope_dim, m.rope_dim),
                    ],
                );
            }
        }
        Attention::Hybrid(h) => {
            for scheme in &h.schemes {
                match scheme {
                    LayerScheme::Csa => b.layer(
                        Some(LayerScheme::Csa),
                        block_tokens / h.csa_compression,
                        h.csa_compression,
                        Some(h.compressed_rope.clone()),
                        &[
                            (RegionKind::Rope, h.rope_dtype, h.rope_dim, h.rope_dim),
                            (RegionKind::Content, h.content_dtype, h.content_dim(), 0),
                            (
                                RegionKind::Indexer,
                                h.indexer_dtype,
                                h.indexer_dim,
                                h.indexer_rope_dim,
                            ),
                        ],
                    ),
                    LayerScheme::Hca => b.layer(
                        Some(LayerScheme::Hca),
                        block_tokens / h.hca_compression,
                        h.hca_compression,
                        Some(h.compressed_rope.clone()),
                        &[
                            (RegionKind::Rope, h.rope_dtype, h.rope_dim, h.rope_dim),
                            (RegionKind::Content, h.content_dtype, h.content_dim(), 0),
                        ],
                    ),
                    LayerScheme::Swa => b.layer(Some(LayerScheme::Swa), 0, 1, None, &[]),
                }
            }
        }
        Attention::Gqa(q) => {
            let dims = q.kv_heads * q.head_dim;
            for _ in 0..g.layers {
                b.layer(
                    None,
                    block_tokens,
                    1,
                    None,
                    &[
                        (RegionKind::Key, q.dtype, dims, 0),
                        (RegionKind::Value, q.dtype, dims, 0),
                    ],
                );
            }
        }
    }
    BlockLayout {
        block_tokens,
        payload_len: b.offset,
        layers: b.layers,
    }
}
