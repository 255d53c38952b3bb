//! The geometry presets embedded in the store (the copies of `configs/models/*.toml` the node
//! has), with their block layouts, as `kvfabric.models()` shows them.

use std::sync::OnceLock;

use kvfabric_store::geometry::preset::builtin_presets;
use kvfabric_store::geometry::{Attention, LayerScheme, RegionKind};
use kvfabric_store::{ModelGeometry, HEADER_LEN};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{json, Value};

use crate::error::NativeError;

fn all() -> &'static [ModelGeometry] {
    static PRESETS: OnceLock<Vec<ModelGeometry>> = OnceLock::new();
    PRESETS.get_or_init(builtin_presets)
}

/// The preset called `name`.
pub(crate) fn geometry(name: &str) -> Result<&'static ModelGeometry, NativeError> {
    all()
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| NativeError::UnknownModel {
            name: name.chars().take(80).collect(),
            known: all()
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A region's name as the presets' `[precision]` keys (and `GET /v1/models`) name it: `c_kv`,
/// `k_rope` for MLA; `rope`, `content`, `indexer` for the hybrid; `key`, `value` for GQA.
fn region_name(kind: RegionKind, mla: bool) -> &'static str {
    match kind {
        RegionKind::Latent => "c_kv",
        RegionKind::Rope if mla => "k_rope",
        RegionKind::Rope => "rope",
        RegionKind::Content => "content",
        RegionKind::Indexer => "indexer",
        RegionKind::Key => "key",
        RegionKind::Value => "value",
    }
}

fn describe(g: &ModelGeometry) -> Value {
    let layout = g.block_layout();
    let mla = matches!(g.attention, Attention::Mla(_));
    let layers: Vec<Value> = layout
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let offset = l.regions.first().map_or(0, |r| r.offset);
            json!({
                "index": i,
                "scheme": l.scheme.map(LayerScheme::name),
                "rows": l.rows,
                "tokens_per_row": l.tokens_per_row,
                "offset": offset,
                "bytes": l.len(),
                "regions": l.regions.iter().map(|r| json!({
                    "name": region_name(r.kind, mla),
                    "dtype": r.dtype.name(),
                    "dims": r.dims,
                    "offset": r.offset,
                    "bytes": r.len,
                    "row_bytes": r.row_bytes(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let attention = match &g.attention {
        Attention::Mla(m) => json!({
            "kv_lora_rank": m.kv_lora_rank,
            "rope_dim": m.rope_dim,
            "c_kv": m.c_kv.name(),
            "k_rope": m.k_rope.name(),
            "rope_convention": format!("{:?}", m.rope.convention),
        }),
        Attention::Hybrid(h) => json!({
            "head_dim": h.head_dim,
            "rope_dim": h.rope_dim,
            "indexer_dim": h.indexer_dim,
            "csa_compression": h.csa_compression,
            "hca_compression": h.hca_compression,
            "swa_window": h.swa_window,
        }),
        Attention::Gqa(q) => json!({
            "kv_heads": q.kv_heads,
            "head_dim": q.head_dim,
            "dtype": q.dtype.name(),
        }),
    };
    json!({
        "name": g.name,
        "kind": g.kind().name(),
        "layers": g.layers,
        "query_heads": g.query_heads,
        "block_tokens": layout.block_tokens,
        "block_bytes": layout.payload_len,
        "header_bytes": HEADER_LEN,
        "storable": g.is_storable(),
        "fingerprint": hex(&g.fingerprint()),
        "attention": attention,
        "layer_layout": layers,
    })
}

/// Every embedded preset with its layout, as JSON (`kvfabric.models()` decodes it).
#[pyfunction]
pub(crate) fn models_json() -> String {
    Value::Array(all().iter().map(describe).collect()).to_string()
}

/// The 16-byte geometry fingerprint of preset `model`.
#[pyfunction]
pub(crate) fn fingerprint<'py>(py: Python<'py>, model: &str) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &geometry(model)?.fingerprint()))
}
