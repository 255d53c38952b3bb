//! Every preset's RoPE pinned against the models' own code: `tests/data/rope_vectors.json`,
//! written by `tools/rope_vectors.py` from transformers' own classes (DeepseekV2/V3, Kimi K2
//! as DeepseekV3, MiniCPM3, DeepseekV4's compressors), and `.ci/run` regenerates it.
//!
//! For each preset: the layer map and the RoPE each layer uses are the model's; the fabric's
//! frequencies are the model's float32 `inv_freq` (for every block: a LongRoPE model's
//! short/long choice included); the attention factor is the model's; and a whole block rotated
//! by [`rotate_block`] to position `P` gives the rows the model's own rotary embedding and
//! apply function give, within this bound per element (derived, not tuned):
//!
//! ```text
//! |fabric - model| <= ulp_bf16(max(|fabric|, |model|)) / 2        the fabric rounds once to bf16
//!                   + |pair| * (P_row * |inv_model - inv_exact|    the model's f32 frequency
//!                             + ulp_f32(P_row * inv_model) / 2     its f32 angle
//!                             + 2^-20)                             cos/sin and products, f32
//! ```
//!
//! where `|pair|` is the magnitude of the element's rotation pair and `P_row` the row's
//! position. Below a few thousand positions that is half a bf16 ulp plus a hair: the fabric's
//! bf16 value is the model's value rounded to bf16. At 10^5 .. 10^6 the model's own f32 angle
//! drifts by up to `P · 2^-24` rad and the bound widens with it (the test prints how many
//! elements were the model's value rounded, bit for bit).

use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::geometry::{Attention, LayerScheme, RegionKind};
use kvfabric_store::rope::{rotate_block, Direction, RopeConvention, RopeScaling, RopeSpec};
use kvfabric_store::{Dtype, ModelGeometry, StoreError};
use serde_json::Value;

const VECTORS: &str = include_str!("data/rope_vectors.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).expect("rope_vectors.json parses")
}

/// A string of 8-hex-digit IEEE-754 float32 values.
fn f32s(v: &Value) -> Vec<f32> {
    let s = v.as_str().expect("a hex string");
    assert_eq!(s.len() % 8, 0);
    (0..s.len())
        .step_by(8)
        .map(|i| f32::from_bits(u32::from_str_radix(&s[i..i + 8], 16).unwrap()))
        .collect()
}

fn ulp_f32(x: f64) -> f64 {
    let x = x.abs().max(f64::from(f32::MIN_POSITIVE));
    2f64.powi(x.log2().floor() as i32 - 23)
}

fn ulp_bf16(x: f64) -> f64 {
    let x = x.abs().max(f64::from(f32::MIN_POSITIVE));
    2f64.powi(x.log2().floor() as i32 - 7)
}

fn bf16(v: f32) -> [u8; 2] {
    half::bf16::from_f32(v).to_le_bytes()
}

fn from_bf16(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// The partner of dim `i` in a rotation pair.
fn partner(convention: RopeConvention, i: usize, dims: usize) -> usize {
    match convention {
        RopeConvention::HalfSplit => (i + dims / 2) % dims,
        RopeConvention::Interleaved => i ^ 1,
    }
}

/// The pair index of dim `i`.
fn pair(convention: RopeConvention, i: usize, dims: usize) -> usize {
    match convention {
        RopeConvention::HalfSplit => i % (dims / 2),
        RopeConvention::Interleaved => i / 2,
    }
}

/// Tally of a comparison: elements seen, and those equal to the model's value rounded.
#[derive(Default)]
struct Tally {
    elements: usize,
    rounded_equal: usize,
    worst_in_bounds: f64,
}

/// Compares rotated RoPE dims with the model's, by the bound of the module docs.
#[allow(clippy::too_many_arguments)]
fn assert_rotated(
    what: &str,
    convention: RopeConvention,
    fabric: &[f32],
    model: &[f32],
    position: u64,
    inv_model: &[f32],
    inv_exact: &[f64],
    tally: &mut Tally,
) {
    let d = model.len();
    assert_eq!(fabric.len(), d, "{what}");
    for i in 0..d {
        let k = pair(convention, i, d);
        let p = position as f64;
        let inv_m = f64::from(inv_model[k]);
        let magnitude = f64::from(model[i]).hypot(f64::from(model[partner(convention, i, d)]));
        let drift = p * (inv_m - inv_exact[k]).abs() + ulp_f32(p * inv_m) / 2.0 + 2f64.powi(-20);
        let (y, m) = (f64::from(fabric[i]), f64::from(model[i]));
        let bound = ulp_bf16(y.abs().max(m.abs())) / 2.0 + magnitude * drift;
        let err = (y - m).abs();
        assert!(
            err <= bound,
            "{what}, dim {i} at position {position}: fabric {y} vs model {m}: off by {err:e}, \
             bound {bound:e} (pair magnitude {magnitude})"
        );
        tally.elements += 1;
        tally.worst_in_bounds = tally.worst_in_bounds.max(err / bound);
        if half::bf16::from_f32(model[i]).to_f32() == fabric[i] {
            tally.rounded_equal += 1;
        }
    }
}

/// The model's float32 frequencies are the fabric's f64 ones, rounded (within 2 f32 ulps:
/// the model computes them with float32 pow, division and, for YaRN, its ramp blend).
fn assert_frequencies(what: &str, model: &[f32], fabric: &[f64]) {
    assert_eq!(model.len(), fabric.len(), "{what}");
    for (i, (m, f)) in model.iter().zip(fabric).enumerate() {
        let err = (f64::from(*m) - f).abs();
        assert!(
            err <= 2.0 * ulp_f32(*f),
            "{what}: pair {i}: model inv_freq {m} vs fabric {f} ({:.1} f32 ulps)",
            err / ulp_f32(*f)
        );
    }
}

fn mla_rope(g: &ModelGeometry) -> RopeSpec {
    match &g.attention {
        Attention::Mla(m) => m.rope.clone(),
        _ => panic!("{} is not mla", g.name),
    }
}

/// The geometry a vector set was generated for: the preset, or its named variant.
fn mla_geometry(entry: &Value) -> ModelGeometry {
    let name = entry["preset"].as_str().unwrap();
    let mut g = builtin_preset(name).unwrap_or_else(|| panic!("no preset {name}"));
    match entry["variant"].as_str() {
        None => {}
        Some("long-factors-doubled") => {
            let Attention::Mla(m) = &mut g.attention else {
                unreachable!()
            };
            let RopeScaling::LongRope(l) = &mut m.rope.scaling else {
                panic!("{name} is not LongRoPE")
            };
            l.long_factors = l.short_factors.iter().map(|f| 2.0 * f).collect();
        }
        Some(other) => panic!("unknown variant {other}"),
    }
    g
}

#[test]
fn mla_presets_rotate_as_their_models_do() {
    let v = vectors();
    let mut seen = Vec::new();
    for entry in v["mla"].as_array().unwrap() {
        let g = mla_geometry(entry);
        let what = format!(
            "{} ({})",
            g.name,
            entry["variant"].as_str().unwrap_or("published")
        );
        let rope = mla_rope(&g);
        let layout = g.block_layout();
        let dims = entry["rope_dim"].as_u64().unwrap() as usize;
        let Attention::Mla(m) = &g.attention else {
            unreachable!()
        };
        assert_eq!(m.rope_dim as usize, dims, "{what}");
        assert_eq!(
            rope.attention_factor(),
            entry["attention_scaling"].as_f64().unwrap(),
            "{what}: attention factor"
        );
        let rows: Vec<usize> = entry["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap() as usize)
            .collect();
        let x: Vec<Vec<f32>> = entry["x"].as_array().unwrap().iter().map(f32s).collect();
        let mut canonical = vec![0u8; layout.payload_len as usize];
        for (layer, region) in layout.rope_regions() {
            assert_eq!(region.kind, RegionKind::Rope);
            assert_eq!(layer.tokens_per_row, 1);
            for (row, values) in rows.iter().zip(&x) {
                let at = region.offset as usize + row * dims * 2;
                for (i, v) in values.iter().enumerate() {
                    canonical[at + 2 * i..at + 2 * i + 2].copy_from_slice(&bf16(*v));
                }
            }
        }
        let mut tally = Tally::default();
        for block in entry["blocks"].as_array().unwrap() {
            let p = block["position"].as_u64().unwrap();
            let seq_len = p + u64::from(layout.block_tokens);
            let inv_model = f32s(&block["inv_freq"]);
            let inv_exact = rope.inv_freq(dims as u32, seq_len);
            assert_frequencies(&format!("{what}, block at {p}"), &inv_model, &inv_exact);
            let mut payload = canonical.clone();
            rotate_block(&layout, &mut payload, p, Direction::Forward).unwrap();
            let regions: Vec<_> = layout.rope_regions().collect();
            for (layer, region) in [regions[0], regions[regions.len() - 1]] {
                assert!(layer.rope.is_some());
                for (k, row) in rows.iter().enumerate() {
                    let at = region.offset as usize + row * dims * 2;
                    let fabric = from_bf16(&payload[at..at + dims * 2]);
                    let model = f32s(&block["out"][k]);
                    assert_rotated(
                        &format!("{what}, row {row} of a block at {p}"),
                        rope.convention,
                        &fabric,
                        &model,
                        p + *row as u64,
                        &inv_model,
                        &inv_exact,
                        &mut tally,
                    );
                }
            }
        }
        eprintln!(
            "{what}: {} of {} rotated elements are the model's value rounded to bf16, bit for \
             bit; the worst error is {:.2} of its bound",
            tally.rounded_equal, tally.elements, tally.worst_in_bounds
        );
        seen.push(what);
    }
    for name in [
        "deepseek-v2-lite",
        "deepseek-v2",
        "deepseek-v3",
        "kimi-k2",
        "minicpm3-4b",
    ] {
        assert!(
            seen.iter()
                .any(|s| s.starts_with(&format!("{name} (published)"))),
            "no vectors for {name}"
        );
    }
}

#[test]
fn longrope_picks_the_factor_set_the_model_picks() {
    let v = vectors();
    let variant = v["mla"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["variant"] == "long-factors-doubled")
        .expect("the variant is generated");
    let g = mla_geometry(variant);
    let rope = mla_rope(&g);
    let RopeScaling::LongRope(l) = &rope.scaling else {
        unreachable!()
    };
    let mut sets = Vec::new();
    for block in variant["blocks"].as_array().unwrap() {
        let p = block["position"].as_u64().unwrap();
        let model = f32s(&block["inv_freq"]);
        let short = rope.inv_freq(32, l.original_max_position);
        let long = rope.inv_freq(32, l.original_max_position + 1);
        let picked = if (f64::from(model[15]) - short[15]).abs() < ulp_f32(short[15]) * 4.0 {
            "short"
        } else {
            assert!((f64::from(model[15]) - long[15]).abs() < ulp_f32(long[15]) * 4.0);
            "long"
        };
        sets.push((p, picked));
    }
    // The block ending exactly at original_max_position (32768) is short, the next one long.
    assert!(sets.contains(&(32704, "short")), "{sets:?}");
    assert!(sets.contains(&(32705, "long")), "{sets:?}");
    assert!(sets.contains(&(0, "short")), "{sets:?}");
}

fn scheme_of(layer_type: &str) -> LayerScheme {
    match layer_type {
        "compressed_sparse_attention" => LayerScheme::Csa,
        "heavily_compressed_attention" => LayerScheme::Hca,
        "sliding_attention" => LayerScheme::Swa,
        other => panic!("unknown layer type {other}"),
    }
}

/// The preset with a bf16 indexer: the same RoPE and positions, and every RoPE dim rotatable.
fn with_bf16_indexer(g: &ModelGeometry) -> ModelGeometry {
    let mut g = g.clone();
    let Attention::Hybrid(h) = &mut g.attention else {
        unreachable!()
    };
    h.indexer_dtype = Dtype::Bf16;
    g
}

#[test]
fn hybrid_presets_have_their_models_layer_map_and_ropes() {
    let v = vectors();
    for entry in v["hybrid"].as_array().unwrap() {
        let name = entry["preset"].as_str().unwrap();
        let g = builtin_preset(name).unwrap();
        let Attention::Hybrid(h) = &g.attention else {
            panic!("{name} is not hybrid")
        };
        let types: Vec<LayerScheme> = entry["layer_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| scheme_of(t.as_str().unwrap()))
            .collect();
        assert_eq!(h.schemes, types, "{name}: layer map");
        let rates = &entry["compress_rates"];
        assert_eq!(
            (
                u64::from(h.csa_compression),
                u64::from(h.hca_compression),
                u64::from(h.swa_window),
                u64::from(h.head_dim),
                u64::from(h.rope_dim),
                u64::from(h.indexer_dim),
            ),
            (
                rates["compressed_sparse_attention"].as_u64().unwrap(),
                rates["heavily_compressed_attention"].as_u64().unwrap(),
                entry["sliding_window"].as_u64().unwrap(),
                entry["head_dim"].as_u64().unwrap(),
                entry["rope_dim"].as_u64().unwrap(),
                entry["index_head_dim"].as_u64().unwrap(),
            ),
            "{name}"
        );
        let by_type = &entry["rope_of_layer_type"];
        assert_eq!(by_type["sliding_attention"], "main", "{name}");
        assert_eq!(by_type["compressed_sparse_attention"], "compress", "{name}");
        assert_eq!(
            by_type["heavily_compressed_attention"], "compress",
            "{name}"
        );
        for (label, rope) in [("main", &h.rope), ("compress", &h.compressed_rope)] {
            let model = &entry["ropes"][label];
            assert_frequencies(
                &format!("{name} {label}"),
                &f32s(&model["inv_freq"]),
                &rope.inv_freq(h.rope_dim, 0),
            );
            assert_eq!(
                rope.attention_factor(),
                model["attention_scaling"].as_f64().unwrap(),
                "{name} {label}"
            );
        }
    }
}

#[test]
fn hybrid_compressed_entries_rotate_at_the_positions_their_compressors_use() {
    let v = vectors();
    for entry in v["hybrid"].as_array().unwrap() {
        let name = entry["preset"].as_str().unwrap();
        let preset = builtin_preset(name).unwrap();
        let g = with_bf16_indexer(&preset);
        let Attention::Hybrid(h) = &g.attention else {
            unreachable!()
        };
        let rope = h.compressed_rope.clone();
        let layout = g.block_layout();
        let inv_model = f32s(&entry["ropes"]["compress"]["inv_freq"]);
        let inv_exact = rope.inv_freq(h.rope_dim, 0);
        let mut tally = Tally::default();
        for case in entry["compressed"].as_array().unwrap() {
            let layer_index = case["layer"].as_u64().unwrap() as usize;
            let p = case["position"].as_u64().unwrap();
            let layer = &layout.layers[layer_index];
            let scheme = match case["scheme"].as_str().unwrap() {
                "csa" => LayerScheme::Csa,
                _ => LayerScheme::Hca,
            };
            assert_eq!(layer.scheme, Some(scheme), "{name} layer {layer_index}");
            let rows: Vec<usize> = case["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_u64().unwrap() as usize)
                .collect();
            let region = |kind| layer.regions.iter().find(|r| r.kind == kind).unwrap();
            let mut payload = vec![0u8; layout.payload_len as usize];
            let mut put = |kind, key: &str| {
                let r = region(kind);
                for (k, row) in rows.iter().enumerate() {
                    let values = f32s(&case[key][k]);
                    let at = r.offset as usize + row * r.row_bytes() as usize;
                    for (i, x) in values.iter().enumerate() {
                        payload[at + 2 * i..at + 2 * i + 2].copy_from_slice(&bf16(*x));
                    }
                }
            };
            put(RegionKind::Rope, "canonical");
            if scheme == LayerScheme::Csa {
                put(RegionKind::Indexer, "indexer_canonical");
            }
            rotate_block(&layout, &mut payload, p, Direction::Forward).unwrap();
            let mut check = |kind, key: &str, leading: usize| {
                let r = region(kind);
                for (k, row) in rows.iter().enumerate() {
                    let at = r.offset as usize + row * r.row_bytes() as usize;
                    let fabric = from_bf16(&payload[at..at + r.row_bytes() as usize]);
                    let model = f32s(&case[key][k]);
                    // Dims before the RoPE dims are stored as they are.
                    assert_eq!(fabric[..leading], model[..leading], "{name} {kind:?}");
                    let position = p + (*row as u64) * u64::from(layer.tokens_per_row);
                    assert_rotated(
                        &format!("{name} layer {layer_index} {kind:?} entry {row} at {p}"),
                        rope.convention,
                        &fabric[leading..],
                        &model[leading..],
                        position,
                        &inv_model,
                        &inv_exact,
                        &mut tally,
                    );
                }
            };
            check(RegionKind::Rope, "out", 0);
            if scheme == LayerScheme::Csa {
                check(
                    RegionKind::Indexer,
                    "indexer_out",
                    (h.indexer_dim - h.indexer_rope_dim) as usize,
                );
            }
        }
        eprintln!(
            "{name} (bf16 indexer): {} of {} rotated elements are the model's value rounded to \
             bf16, bit for bit; the worst error is {:.2} of its bound",
            tally.rounded_equal, tally.elements, tally.worst_in_bounds
        );
    }
}

#[test]
fn hybrid_presets_with_an_fp4_indexer_refuse_a_position() {
    for name in ["deepseek-v4-pro", "deepseek-v4-flash"] {
        let g = builtin_preset(name).unwrap();
        let layout = g.block_layout();
        let first_csa = layout
            .layers
            .iter()
            .position(|l| l.scheme == Some(LayerScheme::Csa))
            .unwrap() as u32;
        let mut payload = vec![7u8; layout.payload_len as usize];
        let before = payload.clone();
        for direction in [Direction::Forward, Direction::Inverse] {
            match rotate_block(&layout, &mut payload, 128, direction) {
                Err(e @ StoreError::PositionShiftUnsupported { .. }) => {
                    let StoreError::PositionShiftUnsupported { layer, region, .. } = &e else {
                        unreachable!()
                    };
                    assert_eq!((*layer, *region), (first_csa, "indexer"), "{name}");
                    let msg = e.to_string();
                    assert!(
                        msg.contains("64 of its 128 dims") && msg.contains("fp4"),
                        "{msg}"
                    );
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(payload == before, "{name}: nothing touched");
    }
}
