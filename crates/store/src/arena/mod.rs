//! The per-request arena of a DeepSeek-V4 hybrid model: sliding-window rows and the
//! uncompressed tail of each compressed layer.
//!
//! Owns: the rows that do not page. They belong to one request, are never content-addressed,
//! never sealed and never shared; the arena is sized once from the geometry and never grows.
//! MLA (and GQA) models have no arena: their whole cache is in blocks.
//!
//! A *row* is one token's uncompressed entry for one layer: `rope_dim` RoPE dims in the RoPE
//! dtype followed by `head_dim - rope_dim` content dims in the content dtype, little-endian, as
//! the engine hands it over (no canonicalisation: the arena never leaves the request). For
//! V4-Pro that is 64 × 2 + 448 × 1 = 576 bytes.
//!
//! Sizing rule, exact:
//!
//! ```text
//! bytes = row_bytes × ( layers × swa_window                  every layer: a ring of the window
//!                     + csa_layers × csa_compression         each CSA layer: one open group
//!                     + hca_layers × hca_compression )       each HCA layer: one open group
//! ```
//!
//! A compressed layer's group holds up to `compression` rows: between appends at most
//! `compression - 1` wait; the row that completes a group fills it, and that layer accepts no
//! further row until the group is drained (handed to the compressor). The arena keeps nothing
//! of a drained group; a compressor whose windows overlap (V4's CSA) keeps the previous group
//! itself. For V4-Pro (61 layers: 30 CSA with k1 = 4, 31 HCA with k2 = 128 = one block;
//! window 128; 576-byte rows):
//!
//! ```text
//! 576 × (61 × 128 + 30 × 4 + 31 × 128) = 576 × 11,896 = 6,852,096 bytes per request
//! ```
//!
//! of which the windows are 4,497,408 bytes, the CSA groups 69,120 and the HCA groups
//! 2,285,568. V4-Flash (43 layers: 2 SWA, 21 CSA, 20 HCA): 576 × 8,148 = 4,693,248 bytes.
//!
//! [`Arenas`] is the node's table of live arenas, one per request: create, append, read,
//! drain, free, bounded in count and in bytes.

mod table;

pub use table::{ArenaId, ArenaLimits, Arenas};

use crate::geometry::{Attention, HybridGeometry, LayerScheme, ModelGeometry};
use crate::units::ByteCount;

/// What the arena refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArenaError {
    /// The model is not a hybrid: MLA and GQA keep no per-request arena.
    #[error("model `{name}` is {kind}: only hybrid (DeepSeek-V4) models keep a per-request arena; an MLA cache is all in blocks")]
    NotHybrid {
        /// Preset name.
        name: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A layer index past the model's layers.
    #[error("layer {layer} does not exist: expected a layer below {layers}")]
    UnknownLayer {
        /// Layer asked for.
        layer: u32,
        /// Layers of the model.
        layers: u32,
    },
    /// A row whose length is not the geometry's row length.
    #[error("row length: expected {expected} bytes (rope + content dims), found {found}")]
    RowLength {
        /// Bytes of one row.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
    /// A row for a layer whose completed group has not been drained.
    #[error(
        "layer {layer}: its completed group of {rows} rows must be drained before the next row"
    )]
    GroupNotDrained {
        /// The layer.
        layer: u32,
        /// Rows of the waiting group.
        rows: u32,
    },
    /// A drain of a group that is not complete yet.
    #[error("layer {layer}: group incomplete: expected {expected} rows, found {found}")]
    GroupIncomplete {
        /// The layer.
        layer: u32,
        /// Rows of a complete group (the layer's compression).
        expected: u32,
        /// Rows waiting.
        found: u32,
    },
    /// A drain on a sliding-window-only layer, which compresses nothing.
    #[error("layer {layer} is sliding-window only: it has no groups to drain")]
    NoGroups {
        /// The layer.
        layer: u32,
    },
    /// A whole token's rows whose length is not `layers × row bytes`.
    #[error(
        "token rows: expected {expected} bytes ({layers} layers × {row_bytes}), found {found}"
    )]
    TokenLength {
        /// Bytes of one token across all layers.
        expected: usize,
        /// Layers of the model.
        layers: u32,
        /// Bytes of one row.
        row_bytes: usize,
        /// Bytes given.
        found: usize,
    },
    /// An arena id that is not live (never created, or freed).
    #[error("arena {0} does not exist (never created, or freed)")]
    UnknownArena(u64),
    /// A create beyond the table's count bound.
    #[error("at most {max} arenas may be live at once; free one first")]
    TooManyArenas {
        /// The bound (`arenas_max`).
        max: u32,
    },
    /// A create beyond the table's byte bound.
    #[error("an arena of {needed} would exceed the arenas' budget: {used} of {max} in use")]
    OverBudget {
        /// The new arena's size.
        needed: ByteCount,
        /// Bytes held by live arenas.
        used: ByteCount,
        /// The bound (`bytes_max`).
        max: ByteCount,
    },
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The row entered the window (a sliding-window-only layer).
    WindowOnly,
    /// The row entered the window and the open group, which now holds `rows` of `needed`.
    GroupOpen {
        /// Rows in the group.
        rows: u32,
        /// Rows of a complete group.
        needed: u32,
    },
    /// The row entered the window and completed the group: drain it before the layer's next row.
    GroupComplete,
}

/// One layer's slice of the arena.
#[derive(Debug, Clone)]
struct LayerSlot {
    scheme: LayerScheme,
    /// Byte offset of the window ring.
    ring_offset: usize,
    /// Ring index of the oldest row.
    ring_head: u32,
    /// Rows in the ring (at most the window).
    ring_len: u32,
    /// Byte offset of the group; meaningless when `group_rows` is 0.
    group_offset: usize,
    /// Rows of a complete group (the compression); 0 for SWA layers.
    group_rows: u32,
    /// Rows waiting in the group.
    group_len: u32,
    /// Rows ever appended to this layer.
    appended: u64,
}

/// The per-request arena of a hybrid model (see the module doc for the sizing rule).
#[derive(Debug, Clone)]
pub struct RequestArena {
    row_bytes: usize,
    window: u32,
    layers: Vec<LayerSlot>,
    buf: Vec<u8>,
}

/// A layer's window in order, oldest row first, as at most two contiguous runs of rows.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    older: &'a [u8],
    newer: &'a [u8],
    row_bytes: usize,
}

impl<'a> Window<'a> {
    /// Rows in the window.
    pub fn len(&self) -> usize {
        (self.older.len() + self.newer.len()) / self.row_bytes
    }

    /// Whether the window holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows, oldest first.
    pub fn rows(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let n = self.row_bytes;
        self.older.chunks_exact(n).chain(self.newer.chunks_exact(n))
    }

    /// The two contiguous runs (`older` then `newer`); `newer` is empty until the ring wraps.
    pub fn as_slices(&self) -> (&'a [u8], &'a [u8]) {
        (self.older, self.newer)
    }
}

/// Bytes of one row of a hybrid geometry: RoPE dims plus content dims.
pub fn row_bytes(h: &HybridGeometry) -> ByteCount {
    let rope = u64::from(h.rope_dim) * h.rope_dtype.bits() / 8;
    let content = u64::from(h.content_dim()) * h.content_dtype.bits() / 8;
    ByteCount(rope + content)
}

/// Rows of the open group a layer of `scheme` keeps: the compression, or 0 for SWA.
fn group_rows(h: &HybridGeometry, scheme: LayerScheme) -> u32 {
    match scheme {
        LayerScheme::Csa => h.csa_compression,
        LayerScheme::Hca => h.hca_compression,
        LayerScheme::Swa => 0,
    }
}

/// The arena size of a hybrid geometry, by the documented rule.
pub fn capacity_bytes(h: &HybridGeometry) -> ByteCount {
    let rows: u64 = h
        .schemes
        .iter()
        .map(|s| u64::from(h.swa_window) + u64::from(group_rows(h, *s)))
        .sum();
    ByteCount(row_bytes(h).0 * rows)
}

fn hybrid(g: &ModelGeometry) -> Result<&HybridGeometry, ArenaError> {
    match &g.attention {
        Attention::Hybrid(h) => Ok(h),
        _ => Err(ArenaError::NotHybrid {
            name: g.name.clone(),
            kind: g.kind().name(),
        }),
    }
}

impl RequestArena {
    /// The size an arena of `g` is allocated at (see the module doc), without allocating it.
    pub fn size_for(g: &ModelGeometry) -> Result<ByteCount, ArenaError> {
        Ok(capacity_bytes(hybrid(g)?))
    }

    /// An empty arena for one request of `g`, allocated once at its full size.
    pub fn new(g: &ModelGeometry) -> Result<RequestArena, ArenaError> {
        let h = hybrid(g)?;
        let row_bytes = row_bytes(h).as_usize();
        let window_bytes = h.swa_window as usize * row_bytes;
        let mut offset = 0usize;
        let mut layers = Vec::with_capacity(h.schemes.len());
        for &scheme in &h.schemes {
            let group_rows = group_rows(h, scheme);
            layers.push(LayerSlot {
                scheme,
                ring_offset: offset,
                ring_head: 0,
                ring_len: 0,
                group_offset: offset + window_bytes,
                group_rows,
                group_len: 0,
                appended: 0,
            });
            offset += window_bytes + group_rows as usize * row_bytes;
        }
        debug_assert_eq!(offset as u64, capacity_bytes(h).0);
        Ok(RequestArena {
            row_bytes,
            window: h.swa_window,
            layers,
            buf: vec![0; offset],
        })
    }

    /// Total bytes held, fixed at creation: equals [`capacity_bytes`] of the geometry.
    pub fn bytes(&self) -> ByteCount {
        ByteCount(self.buf.len() as u64)
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Rows of each layer's window.
    pub fn window_rows(&self) -> u32 {
        self.window
    }

    /// Layers of the model.
    pub fn layers(&self) -> u32 {
        self.layers.len() as u32
    }

    fn slot(&self, layer: u32) -> Result<&LayerSlot, ArenaError> {
        self.layers
            .get(layer as usize)
            .ok_or(ArenaError::UnknownLayer {
                layer,
                layers: self.layers(),
            })
    }

    /// The scheme of `layer`.
    pub fn scheme(&self, layer: u32) -> Result<LayerScheme, ArenaError> {
        Ok(self.slot(layer)?.scheme)
    }

    /// Rows ever appended to `layer` (the request's token count for that layer).
    pub fn appended(&self, layer: u32) -> Result<u64, ArenaError> {
        Ok(self.slot(layer)?.appended)
    }

    /// Rows of a complete group of `layer`: its compression (0 on a sliding-window-only layer).
    pub fn group_needed(&self, layer: u32) -> Result<u32, ArenaError> {
        Ok(self.slot(layer)?.group_rows)
    }

    /// Rows waiting in `layer`'s open group (always 0 for a sliding-window-only layer).
    pub fn group_len(&self, layer: u32) -> Result<u32, ArenaError> {
        Ok(self.slot(layer)?.group_len)
    }

    /// Appends the next token's row of `layer`: into the window (evicting the oldest row once
    /// the window is full) and, on a CSA or HCA layer, into the open group. Nothing is written
    /// when an error is returned.
    pub fn append(&mut self, layer: u32, row: &[u8]) -> Result<Appended, ArenaError> {
        let (row_bytes, window) = (self.row_bytes, self.window);
        if row.len() != row_bytes {
            // Checked after the layer so that an unknown layer is reported as such.
            self.slot(layer)?;
            return Err(ArenaError::RowLength {
                expected: row_bytes,
                found: row.len(),
            });
        }
        let layers = self.layers();
        let slot = self
            .layers
            .get_mut(layer as usize)
            .ok_or(ArenaError::UnknownLayer { layer, layers })?;
        if slot.group_rows > 0 && slot.group_len == slot.group_rows {
            return Err(ArenaError::GroupNotDrained {
                layer,
                rows: slot.group_len,
            });
        }
        let ring_index = if slot.ring_len < window {
            slot.ring_len += 1;
            (slot.ring_head + slot.ring_len - 1) % window
        } else {
            let oldest = slot.ring_head;
            slot.ring_head = (slot.ring_head + 1) % window;
            oldest
        };
        let at = slot.ring_offset + ring_index as usize * row_bytes;
        self.buf[at..at + row_bytes].copy_from_slice(row);
        slot.appended += 1;
        if slot.group_rows == 0 {
            return Ok(Appended::WindowOnly);
        }
        let at = slot.group_offset + slot.group_len as usize * row_bytes;
        self.buf[at..at + row_bytes].copy_from_slice(row);
        slot.group_len += 1;
        Ok(if slot.group_len == slot.group_rows {
            Appended::GroupComplete
        } else {
            Appended::GroupOpen {
                rows: slot.group_len,
                needed: slot.group_rows,
            }
        })
    }

    /// Appends one token's rows of every layer, `layers × row_bytes` bytes in layer order, or
    /// nothing: refused whole if the length is wrong or any compressed layer waits to be
    /// drained. Returns what each layer's append did.
    pub fn append_token(&mut self, rows: &[u8]) -> Result<Vec<Appended>, ArenaError> {
        let layers = self.layers();
        let expected = layers as usize * self.row_bytes;
        if rows.len() != expected {
            return Err(ArenaError::TokenLength {
                expected,
                layers,
                row_bytes: self.row_bytes,
                found: rows.len(),
            });
        }
        if let Some((layer, slot)) = self
            .layers
            .iter()
            .enumerate()
            .find(|(_, s)| s.group_rows > 0 && s.group_len == s.group_rows)
        {
            return Err(ArenaError::GroupNotDrained {
                layer: layer as u32,
                rows: slot.group_len,
            });
        }
        let row_bytes = self.row_bytes;
        (0..layers)
            .map(|layer| {
                let at = layer as usize * row_bytes;
                self.append(layer, &rows[at..at + row_bytes])
            })
            .collect()
    }

    /// `layer`'s window in order, oldest row first.
    pub fn window(&self, layer: u32) -> Result<Window<'_>, ArenaError> {
        let slot = self.slot(layer)?;
        let n = self.row_bytes;
        let ring = &self.buf[slot.ring_offset..slot.ring_offset + self.window as usize * n];
        let head = slot.ring_head as usize * n;
        let len = slot.ring_len as usize * n;
        let (older, newer) = if head + len <= ring.len() {
            (&ring[head..head + len], &ring[..0])
        } else {
            (&ring[head..], &ring[..head + len - ring.len()])
        };
        Ok(Window {
            older,
            newer,
            row_bytes: n,
        })
    }

    /// Hands over `layer`'s completed group (its `compression` rows, oldest first) and empties
    /// it. The slice lives until the arena is next modified.
    pub fn drain_group(&mut self, layer: u32) -> Result<&[u8], ArenaError> {
        let row_bytes = self.row_bytes;
        let layers = self.layers();
        let slot = self
            .layers
            .get_mut(layer as usize)
            .ok_or(ArenaError::UnknownLayer { layer, layers })?;
        if slot.group_rows == 0 {
            return Err(ArenaError::NoGroups { layer });
        }
        if slot.group_len != slot.group_rows {
            return Err(ArenaError::GroupIncomplete {
                layer,
                expected: slot.group_rows,
                found: slot.group_len,
            });
        }
        slot.group_len = 0;
        let at = slot.group_offset;
        Ok(&self.buf[at..at + slot.group_rows as usize * row_bytes])
    }

    /// Forgets every row (the request ended and the arena is reused); keeps the allocation.
    pub fn clear(&mut self) {
        for slot in &mut self.layers {
            slot.ring_head = 0;
            slot.ring_len = 0;
            slot.group_len = 0;
            slot.appended = 0;
        }
    }
}

#[cfg(test)]
mod tests;
