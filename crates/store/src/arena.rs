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
//! itself. For V4-Pro (61 layers: 2 SWA, 30 CSA with k1 = 4, 29 HCA with k2 = 128 = one block;
//! window 128; 576-byte rows):
//!
//! ```text
//! 576 × (61 × 128 + 30 × 4 + 29 × 128) = 576 × 11,640 = 6,704,640 bytes per request
//! ```
//!
//! of which the windows are 4,497,408 bytes, the CSA groups 69,120 and the HCA groups
//! 2,138,112.

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

impl RequestArena {
    /// An empty arena for one request of `g`, allocated once at its full size.
    pub fn new(g: &ModelGeometry) -> Result<RequestArena, ArenaError> {
        let Attention::Hybrid(h) = &g.attention else {
            return Err(ArenaError::NotHybrid {
                name: g.name.clone(),
                kind: g.kind().name(),
            });
        };
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
mod tests {
    use super::*;
    use crate::geometry::preset::builtin_preset;

    fn v4() -> ModelGeometry {
        builtin_preset("deepseek-v4-pro").expect("built-in")
    }

    /// A row whose every byte is the token index's low byte, tagged with the layer.
    fn row(arena: &RequestArena, token: u32, layer: u32) -> Vec<u8> {
        let mut r = vec![token as u8; arena.row_bytes()];
        r[0] = layer as u8;
        r
    }

    #[test]
    fn v4_pro_arena_is_6_704_640_bytes() {
        let g = v4();
        let Attention::Hybrid(h) = &g.attention else {
            unreachable!()
        };
        let arena = RequestArena::new(&g).unwrap();
        assert_eq!(arena.row_bytes(), 576);
        assert_eq!(row_bytes(h), ByteCount(576));
        assert_eq!(arena.layers(), 61);
        assert_eq!(arena.window_rows(), 128);
        assert_eq!(arena.bytes(), ByteCount(6_704_640));
        assert_eq!(capacity_bytes(h), arena.bytes());
        // The formula, spelled out.
        let (csa, hca) = (30u64, 29u64);
        assert_eq!(576 * (61 * 128 + csa * 4 + hca * 128), 6_704_640);
        assert_eq!(61 * 128 * 576, 4_497_408);
    }

    #[test]
    fn mla_and_gqa_have_no_arena() {
        for name in ["deepseek-v3", "llama-3.1-8b"] {
            let g = builtin_preset(name).unwrap();
            match RequestArena::new(&g) {
                Err(ArenaError::NotHybrid { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn window_keeps_the_last_rows_in_order_and_never_grows() {
        let mut arena = RequestArena::new(&v4()).unwrap();
        let bytes = arena.bytes();
        assert_eq!(arena.scheme(0).unwrap(), LayerScheme::Swa);
        assert!(arena.window(0).unwrap().is_empty());
        for t in 0..300u32 {
            assert_eq!(
                arena.append(0, &row(&arena, t, 0)).unwrap(),
                Appended::WindowOnly
            );
            let w = arena.window(0).unwrap();
            assert_eq!(w.len(), (t as usize + 1).min(128));
        }
        let w = arena.window(0).unwrap();
        let firsts: Vec<u8> = w.rows().map(|r| r[1]).collect();
        let expected: Vec<u8> = (172..300u32).map(|t| t as u8).collect();
        assert_eq!(firsts, expected);
        assert!(w.rows().all(|r| r[0] == 0));
        let (older, newer) = w.as_slices();
        assert_eq!(older.len() + newer.len(), 128 * 576);
        assert_eq!(arena.appended(0).unwrap(), 300);
        assert_eq!(arena.bytes(), bytes);
        // Layer 1's window is untouched by layer 0's rows.
        assert!(arena.window(1).unwrap().is_empty());
    }

    #[test]
    fn csa_groups_complete_every_k1_rows_and_must_be_drained() {
        let mut arena = RequestArena::new(&v4()).unwrap();
        let layer = 2;
        assert_eq!(arena.scheme(layer).unwrap(), LayerScheme::Csa);
        for t in 0..3u32 {
            let r = row(&arena, t, layer);
            assert_eq!(
                arena.append(layer, &r).unwrap(),
                Appended::GroupOpen {
                    rows: t + 1,
                    needed: 4
                }
            );
        }
        assert_eq!(
            arena.drain_group(layer),
            Err(ArenaError::GroupIncomplete {
                layer,
                expected: 4,
                found: 3
            })
        );
        let r = row(&arena, 3, layer);
        assert_eq!(arena.append(layer, &r).unwrap(), Appended::GroupComplete);
        let r = row(&arena, 4, layer);
        assert_eq!(
            arena.append(layer, &r),
            Err(ArenaError::GroupNotDrained { layer, rows: 4 })
        );
        // The refused row was not written anywhere.
        assert_eq!(arena.window(layer).unwrap().len(), 4);
        assert_eq!(arena.appended(layer).unwrap(), 4);
        let group = arena.drain_group(layer).unwrap().to_vec();
        assert_eq!(group.len(), 4 * 576);
        let tokens: Vec<u8> = group.chunks_exact(576).map(|r| r[1]).collect();
        assert_eq!(tokens, [0, 1, 2, 3]);
        assert_eq!(arena.group_len(layer).unwrap(), 0);
        assert_eq!(
            arena.append(layer, &r).unwrap(),
            Appended::GroupOpen { rows: 1, needed: 4 }
        );
    }

    #[test]
    fn hca_group_is_one_block_of_rows() {
        let mut arena = RequestArena::new(&v4()).unwrap();
        let layer = 3;
        assert_eq!(arena.scheme(layer).unwrap(), LayerScheme::Hca);
        for t in 0..127u32 {
            let r = row(&arena, t, layer);
            assert!(matches!(
                arena.append(layer, &r).unwrap(),
                Appended::GroupOpen { .. }
            ));
        }
        let r = row(&arena, 127, layer);
        assert_eq!(arena.append(layer, &r).unwrap(), Appended::GroupComplete);
        let group = arena.drain_group(layer).unwrap();
        assert_eq!(group.len(), 128 * 576);
        assert!(group
            .chunks_exact(576)
            .enumerate()
            .all(|(i, r)| r[1] == i as u8 && r[0] == 3));
    }

    #[test]
    fn typed_errors() {
        let mut arena = RequestArena::new(&v4()).unwrap();
        assert_eq!(
            arena.append(0, &[0u8; 575]),
            Err(ArenaError::RowLength {
                expected: 576,
                found: 575
            })
        );
        assert_eq!(
            arena.append(61, &[0u8; 576]),
            Err(ArenaError::UnknownLayer {
                layer: 61,
                layers: 61
            })
        );
        assert_eq!(
            arena.append(61, &[0u8; 3]),
            Err(ArenaError::UnknownLayer {
                layer: 61,
                layers: 61
            })
        );
        assert!(matches!(
            arena.window(99),
            Err(ArenaError::UnknownLayer { layer: 99, .. })
        ));
        assert_eq!(arena.drain_group(0), Err(ArenaError::NoGroups { layer: 0 }));
        assert!(
            arena.window(0).unwrap().is_empty(),
            "nothing written by refused appends"
        );
        let msg = ArenaError::RowLength {
            expected: 576,
            found: 575,
        }
        .to_string();
        assert!(
            msg.contains("expected 576") && msg.contains("found 575"),
            "{msg}"
        );
    }

    #[test]
    fn clear_forgets_rows_but_keeps_size() {
        let mut arena = RequestArena::new(&v4()).unwrap();
        for layer in 0..arena.layers() {
            let r = row(&arena, 7, layer);
            arena.append(layer, &r).unwrap();
        }
        let bytes = arena.bytes();
        arena.clear();
        assert_eq!(arena.bytes(), bytes);
        for layer in 0..arena.layers() {
            assert!(arena.window(layer).unwrap().is_empty());
            assert_eq!(arena.group_len(layer).unwrap(), 0);
            assert_eq!(arena.appended(layer).unwrap(), 0);
        }
    }
}
