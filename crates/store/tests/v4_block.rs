//! DeepSeek-V4 blocks through the store: seal, read, dedup and (refused) rotation of a whole
//! V4-Pro block (and V4-Flash), with per-layer CSA / HCA / SWA bytes exactly as
//! `tests/data/kv_bytes.json` (the shared accounting vectors) says, per-region precision, and
//! the rotation of compressed rows where every RoPE dim is rotatable.

use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::geometry::{Attention, LayerScheme, RegionKind};
use kvfabric_store::rope::{rotate_block, Direction};
use kvfabric_store::{
    BlockHeader, ByteCount, Dedup, Dtype, ModelGeometry, NamespaceKey, PutForm, Store, StoreConfig,
    StoreError, HEADER_LEN,
};
use serde_json::Value;

fn kv_bytes() -> Value {
    serde_json::from_str(include_str!("data/kv_bytes.json")).unwrap()
}

/// Deterministic payload: finite bf16 values in RoPE regions, arbitrary bytes elsewhere (fp8
/// and fp4 are stored as opaque bytes).
fn v4_payload(g: &ModelGeometry, seed: u64) -> Vec<u8> {
    let layout = g.block_layout();
    let mut out = vec![0u8; layout.payload_len as usize];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for layer in &layout.layers {
        for r in &layer.regions {
            let bytes = &mut out[r.offset as usize..(r.offset + r.len) as usize];
            if r.dtype == Dtype::Bf16 {
                for c in bytes.chunks_exact_mut(2) {
                    let v = ((next() >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
                    c.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes());
                }
            } else {
                for b in bytes.iter_mut() {
                    *b = (next() >> 56) as u8;
                }
            }
        }
    }
    out
}

fn store() -> Store {
    Store::open(StoreConfig::host_only(ByteCount(64 << 20))).unwrap()
}

#[test]
fn v4_pro_layers_hold_exactly_the_accounted_bytes() {
    let v = kv_bytes();
    let per = &v["deepseek_v4_pro_per_layer"];
    let g = builtin_preset("deepseek-v4-pro").unwrap();
    let Attention::Hybrid(h) = &g.attention else {
        unreachable!()
    };
    let layout = g.block_layout();
    assert_eq!(
        u64::from(layout.block_tokens),
        v["deepseek_v4_pro_block_tokens"].as_u64().unwrap()
    );
    let mut offset = 0;
    for (i, (layer, scheme)) in layout.layers.iter().zip(&h.schemes).enumerate() {
        assert_eq!(layer.scheme, Some(*scheme), "layer {i}");
        let key = match scheme {
            LayerScheme::Csa => "CSA",
            LayerScheme::Hca => "HCA",
            LayerScheme::Swa => "SWA",
        };
        let expected = &per[key];
        // Entries per block and bytes per entry, as accounted.
        assert_eq!(
            u64::from(layer.rows),
            expected["entries_per_128_token_block"].as_u64().unwrap(),
            "layer {i} {key}"
        );
        let entry: u64 = layer.regions.iter().map(|r| r.row_bytes()).sum();
        assert_eq!(
            entry,
            expected["bytes_per_compressed_entry"].as_u64().unwrap(),
            "layer {i} {key}"
        );
        assert_eq!(
            layer.len(),
            expected["bytes_per_128_token_block"].as_u64().unwrap(),
            "layer {i} {key}"
        );
        // Per-region precision: 64 bf16 RoPE dims, 448 fp8 content dims, a 128-dim fp4
        // indexer key on CSA layers (its trailing 64 dims are RoPE dims).
        let shape: Vec<(RegionKind, Dtype, u32, u32)> = layer
            .regions
            .iter()
            .map(|r| (r.kind, r.dtype, r.dims, r.rope_dims))
            .collect();
        let mut expect = vec![
            (RegionKind::Rope, Dtype::Bf16, 64, 64),
            (RegionKind::Content, Dtype::Fp8, 448, 0),
        ];
        if *scheme == LayerScheme::Csa {
            expect.push((RegionKind::Indexer, Dtype::Fp4, 128, 64));
        }
        assert_eq!(shape, expect, "layer {i}");
        // Regions are contiguous, layer after layer.
        for r in &layer.regions {
            assert_eq!(r.offset, offset, "layer {i}");
            offset += r.len;
        }
    }
    assert_eq!(offset, layout.payload_len);
    assert_eq!(layout.payload_len, 30 * 20_480 + 31 * 576);
    // V4-Pro has no sliding-window-only layer; V4-Flash's two hold nothing in a block.
    let flash = builtin_preset("deepseek-v4-flash").unwrap().block_layout();
    let swa = &per["SWA"];
    assert_eq!(swa["bytes_per_compressed_entry"].as_u64().unwrap(), 576);
    for layer in &flash.layers[..2] {
        assert_eq!(layer.scheme, Some(LayerScheme::Swa));
        assert!(
            layer.is_empty(),
            "window rows live in the per-request arena"
        );
    }
    assert_eq!(flash.payload_len, 21 * 20_480 + 20 * 576);
}

#[test]
fn a_v4_pro_block_is_sealed_read_and_deduplicated_exactly() {
    for name in ["deepseek-v4-pro", "deepseek-v4-flash"] {
        let g = builtin_preset(name).unwrap();
        let layout = g.block_layout();
        let ns = NamespaceKey::derive("t");
        let p = v4_payload(&g, 4);
        let mut s = store();
        let a = s.seal(&ns, &g, 128, &p, PutForm::Canonical).unwrap();
        assert_eq!(a.dedup, Dedup::New, "{name}");
        assert_eq!(a.bytes, ByteCount(HEADER_LEN as u64 + layout.payload_len));
        // The header names the geometry; the payload comes back byte for byte, every layer.
        let block = s.read(a.slot).unwrap();
        let header = BlockHeader::decode(block.bytes()).unwrap();
        assert_eq!(header, BlockHeader::for_geometry(&g));
        assert_eq!(
            (header.tokens, header.layers, header.payload_len),
            (128, layout.layers.len() as u32, layout.payload_len)
        );
        let (read, _) = s.read_payload(&a.id, &ns, &g, None).unwrap();
        for (i, layer) in layout.layers.iter().enumerate() {
            for r in &layer.regions {
                let span = r.offset as usize..(r.offset + r.len) as usize;
                assert!(
                    read[span.clone()] == p[span],
                    "{name} layer {i} {:?}",
                    r.kind
                );
            }
        }
        assert!(read == p);
        // The same bytes again: one block. One fp4 nibble of one indexer key changed: another.
        let again = s.seal(&ns, &g, 128, &p, PutForm::Canonical).unwrap();
        assert_eq!(
            (again.dedup, again.id, again.slot),
            (Dedup::Shared, a.id, a.slot)
        );
        let indexer = layout.layers[2]
            .regions
            .iter()
            .find(|r| r.kind == RegionKind::Indexer)
            .expect("layer 2 is CSA");
        let mut q = p.clone();
        q[indexer.offset as usize + 63] ^= 0x01;
        let other = s.seal(&ns, &g, 128, &q, PutForm::Canonical).unwrap();
        assert_eq!(other.dedup, Dedup::New);
        assert_ne!(other.id, a.id);
        // Another namespace: another id for the same bytes.
        let elsewhere = s
            .seal(&NamespaceKey::derive("u"), &g, 128, &p, PutForm::Canonical)
            .unwrap();
        assert_ne!(elsewhere.id, a.id);
        // A block of the wrong size or token count is refused.
        assert!(matches!(
            s.seal(&ns, &g, 128, &p[1..], PutForm::Canonical),
            Err(StoreError::PayloadLength { .. })
        ));
        assert!(matches!(
            s.seal(&ns, &g, 64, &p, PutForm::Canonical),
            Err(StoreError::TokenCount {
                expected: 128,
                found: 64
            })
        ));
    }
}

#[test]
fn a_v4_pro_block_refuses_a_position_and_stores_nothing_for_it() {
    let g = builtin_preset("deepseek-v4-pro").unwrap();
    let ns = NamespaceKey::derive("t");
    let p = v4_payload(&g, 5);
    let mut s = store();
    let a = s.seal(&ns, &g, 128, &p, PutForm::Canonical).unwrap();
    let refused = |e: StoreError| match e {
        StoreError::PositionShiftUnsupported { layer, region, .. } => {
            assert_eq!((layer, region), (2, "indexer"))
        }
        other => panic!("{other:?}"),
    };
    refused(s.read_payload(&a.id, &ns, &g, Some(128)).unwrap_err());
    let blocks = s.len();
    refused(
        s.seal(&ns, &g, 128, &p, PutForm::Rotated { position: 256 })
            .unwrap_err(),
    );
    assert_eq!(s.len(), blocks, "a refused rotated put stores nothing");
    // Without a position the block is still served exactly.
    assert!(s.read_payload(&a.id, &ns, &g, None).unwrap().0 == p);
}

#[test]
fn with_a_bf16_indexer_a_read_at_a_position_turns_only_rope_dims() {
    let mut g = builtin_preset("deepseek-v4-pro").unwrap();
    let Attention::Hybrid(h) = &mut g.attention else {
        unreachable!()
    };
    h.indexer_dtype = Dtype::Bf16;
    let layout = g.block_layout();
    let ns = NamespaceKey::derive("t");
    let p = v4_payload(&g, 6);
    let mut s = store();
    let a = s.seal(&ns, &g, 128, &p, PutForm::Canonical).unwrap();
    let position = 65_536;
    let (read, _) = s.read_payload(&a.id, &ns, &g, Some(position)).unwrap();
    let mut expect = p.clone();
    rotate_block(&layout, &mut expect, position, Direction::Forward).unwrap();
    assert!(
        read == expect,
        "a read rotates canonical rows once, bit for bit"
    );
    for layer in &layout.layers {
        for r in &layer.regions {
            let row = r.row_bytes() as usize;
            let keep = row - r.rope_dims as usize * 2;
            for (got, was) in read[r.offset as usize..(r.offset + r.len) as usize]
                .chunks_exact(row)
                .zip(p[r.offset as usize..(r.offset + r.len) as usize].chunks_exact(row))
            {
                // Content dims and the indexer's leading dims are untouched; RoPE dims turn.
                assert_eq!(got[..keep], was[..keep], "{:?}", r.kind);
                if r.rope_dims > 0 {
                    assert_ne!(got[keep..], was[keep..], "{:?}", r.kind);
                }
            }
        }
    }
}
