//! The node's model catalog: the geometry presets it accepts, looked up by name (puts) and by
//! geometry fingerprint (reads of stored blocks), with the summary `GET /v1/models` and
//! `kvfabric models` print.
//!
//! The catalog is the embedded presets unless the config names a models directory, in which
//! case it is exactly that directory's presets (so an operator can narrow or extend the set).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use kvfabric_store::arena::RequestArena;
use kvfabric_store::geometry::accounting::block_bytes;
use kvfabric_store::geometry::preset::{builtin_presets, load_dir};
use kvfabric_store::geometry::{Attention, BlockLayout};
use kvfabric_store::{ByteCount, ModelGeometry, StoreError, HEADER_LEN};
use serde::Serialize;

/// One preset with its derived layout.
#[derive(Debug)]
pub struct Model {
    /// The geometry.
    pub geometry: ModelGeometry,
    /// Its block layout (derived once).
    pub layout: BlockLayout,
}

/// What the API and the CLI say about a preset.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// Preset name, as sent in `kvfabric-model`.
    pub name: String,
    /// `mla`, `hybrid` or `gqa`.
    pub kind: &'static str,
    /// Decoder layers.
    pub layers: u32,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Payload bytes of one block (what a put sends; the stored block adds a 64-byte header).
    pub block_bytes: u64,
    /// Element type of each region, keyed as in the preset's `[precision]` table.
    pub dtypes: BTreeMap<&'static str, &'static str>,
    /// Whether blocks of this model can be stored (GQA presets are for accounting only).
    pub storable: bool,
}

/// The presets a node accepts.
#[derive(Debug)]
pub struct Catalog {
    models: Vec<Model>,
    by_fingerprint: HashMap<[u8; 16], usize>,
}

impl Catalog {
    /// The embedded presets.
    pub fn builtin() -> Catalog {
        Catalog::new(builtin_presets())
    }

    /// The presets of `dir` (every `*.toml`, not recursive).
    pub fn from_dir(dir: &Path) -> Result<Catalog, StoreError> {
        Ok(Catalog::new(load_dir(dir)?))
    }

    /// Exactly these presets.
    pub fn of(geometries: Vec<ModelGeometry>) -> Catalog {
        Catalog::new(geometries)
    }

    fn new(geometries: Vec<ModelGeometry>) -> Catalog {
        let models: Vec<Model> = geometries
            .into_iter()
            .map(|geometry| Model {
                layout: geometry.block_layout(),
                geometry,
            })
            .collect();
        let by_fingerprint = models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.geometry.fingerprint(), i))
            .collect();
        Catalog {
            models,
            by_fingerprint,
        }
    }

    /// The preset called `name`, or [`StoreError::UnknownModel`] listing the known ones (the
    /// store's [`lookup`](kvfabric_store::geometry::preset::lookup) error, without cloning).
    pub fn lookup(&self, name: &str) -> Result<&Model, StoreError> {
        self.models
            .iter()
            .find(|m| m.geometry.name == name)
            .ok_or_else(|| StoreError::UnknownModel {
                name: name.chars().take(80).collect(),
                known: self
                    .models
                    .iter()
                    .map(|m| m.geometry.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The preset whose geometry has this fingerprint (a stored block's header names it).
    pub fn by_fingerprint(&self, fingerprint: &[u8; 16]) -> Option<&Model> {
        self.by_fingerprint
            .get(fingerprint)
            .map(|&i| &self.models[i])
    }

    /// Summaries of every preset, in catalog order.
    pub fn infos(&self) -> Vec<ModelInfo> {
        self.models.iter().map(info).collect()
    }

    /// Whole stored size (header + payload) of the largest storable block; `None` if no preset
    /// is storable.
    pub fn largest_block_bytes(&self) -> Option<u64> {
        self.storable_block_bytes().max()
    }

    /// Whole stored size of the smallest storable block.
    pub fn smallest_block_bytes(&self) -> Option<u64> {
        self.storable_block_bytes().min()
    }

    /// The hybrid preset whose per-request arena is largest, and that arena's size; `None`
    /// without a hybrid preset.
    pub fn largest_arena(&self) -> Option<(&Model, ByteCount)> {
        self.models
            .iter()
            .filter_map(|m| RequestArena::size_for(&m.geometry).ok().map(|b| (m, b)))
            .max_by_key(|(_, b)| b.0)
    }

    fn storable_block_bytes(&self) -> impl Iterator<Item = u64> + '_ {
        self.models
            .iter()
            .filter(|m| m.geometry.is_storable())
            .map(|m| m.layout.payload_len + HEADER_LEN as u64)
    }
}

fn info(m: &Model) -> ModelInfo {
    let g = &m.geometry;
    let mut dtypes = BTreeMap::new();
    match &g.attention {
        Attention::Mla(a) => {
            dtypes.insert("c_kv", a.c_kv.name());
            dtypes.insert("k_rope", a.k_rope.name());
        }
        Attention::Hybrid(h) => {
            dtypes.insert("rope", h.rope_dtype.name());
            dtypes.insert("content", h.content_dtype.name());
            dtypes.insert("indexer", h.indexer_dtype.name());
        }
        Attention::Gqa(q) => {
            dtypes.insert("kv", q.dtype.name());
        }
    }
    ModelInfo {
        name: g.name.clone(),
        kind: g.kind().name(),
        layers: g.layers,
        block_tokens: g.block_tokens(),
        block_bytes: block_bytes(g).0,
        dtypes,
        storable: g.is_storable(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_finds_by_name_and_fingerprint() {
        let c = Catalog::builtin();
        let v3 = c.lookup("deepseek-v3").unwrap();
        assert_eq!(v3.geometry.block_tokens(), 64);
        // 61 layers × (512 + 64) dims × 2 B × 64 tokens.
        assert_eq!(v3.layout.payload_len, 61 * 576 * 2 * 64);
        let fp = v3.geometry.fingerprint();
        assert_eq!(c.by_fingerprint(&fp).unwrap().geometry.name, "deepseek-v3");
        assert!(matches!(
            c.lookup("gpt-2"),
            Err(StoreError::UnknownModel { .. })
        ));
        let infos = c.infos();
        let llama = infos.iter().find(|i| i.kind == "gqa").unwrap();
        assert!(!llama.storable);
        assert!(c.smallest_block_bytes().unwrap() < c.largest_block_bytes().unwrap());
    }
}
