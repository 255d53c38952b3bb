//! Position independence of `k_rope`: canonical storage, rotated puts, reads at a position.

mod common;

use common::{payload, tiny_mla};
use kvfabric_store::geometry::{Attention, RegionKind};
use kvfabric_store::rope::{rotate_block, Direction, RopeConvention, RopeScaling, Yarn};
use kvfabric_store::{ByteCount, Dedup, NamespaceKey, PutForm, Store, StoreConfig};
use proptest::prelude::*;

fn bf16s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// One bf16 ulp at magnitude `m` (the spacing of bf16 values around m).
fn ulp_bf16(m: f32) -> f32 {
    let m = m.abs().max(f32::MIN_POSITIVE);
    let e = m.log2().floor() as i32;
    2f32.powi(e - 7)
}

/// Rotates every rope row of `payload` (rows already at `p + r`) by `(q - p)` directly:
/// the reference for "rotating the original vectors from p to q".
fn rotate_by_delta(geometry: &kvfabric_store::ModelGeometry, payload: &mut [u8], delta: f64) {
    let layout = geometry.block_layout();
    for (layer, region) in layout.rope_regions() {
        let rope = layer.rope.as_ref().unwrap();
        let inv = rope.inv_freq(region.dims, 0); // plain RoPE: no dependence on length
        let half = inv.len();
        let bytes = &mut payload[region.offset as usize..(region.offset + region.len) as usize];
        for row in bytes.chunks_exact_mut(region.dims as usize * 2) {
            let mut v = bf16s(row);
            for (i, f) in inv.iter().enumerate() {
                let (a, b) = match rope.convention {
                    RopeConvention::HalfSplit => (i, i + half),
                    RopeConvention::Interleaved => (2 * i, 2 * i + 1),
                };
                let (c, s) = ((delta * f).cos() as f32, (delta * f).sin() as f32);
                let (x, y) = (v[a], v[b]);
                v[a] = x * c - y * s;
                v[b] = x * s + y * c;
            }
            for (i, x) in v.iter().enumerate() {
                row[2 * i..2 * i + 2].copy_from_slice(&half::bf16::from_f32(*x).to_le_bytes());
            }
        }
    }
}

fn rope_values(geometry: &kvfabric_store::ModelGeometry, payload: &[u8]) -> Vec<(f32, f32)> {
    // (value, magnitude of its rotation pair) for every rope element.
    let layout = geometry.block_layout();
    let mut out = Vec::new();
    for (layer, region) in layout.rope_regions() {
        let conv = layer.rope.as_ref().unwrap().convention;
        let bytes = &payload[region.offset as usize..(region.offset + region.len) as usize];
        for row in bytes.chunks_exact(region.dims as usize * 2) {
            let v = bf16s(row);
            let half = v.len() / 2;
            for i in 0..v.len() {
                let partner = match conv {
                    RopeConvention::HalfSplit => (i + half) % v.len(),
                    RopeConvention::Interleaved => i ^ 1,
                };
                out.push((v[i], v[i].hypot(v[partner])));
            }
        }
    }
    out
}

fn store() -> Store {
    Store::open(StoreConfig::host_only(ByteCount(16 << 20))).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A block put rotated at p, read at q, equals rotating the put vectors from p to q
    /// directly, within one bf16 ulp of the rotated pair's magnitude.
    #[test]
    fn rotated_put_then_read_matches_direct_rotation(
        seed in any::<u64>(),
        p in 0u64..200_000,
        q in 0u64..200_000,
        interleaved in any::<bool>(),
    ) {
        let conv = if interleaved { RopeConvention::Interleaved } else { RopeConvention::HalfSplit };
        let g = tiny_mla(conv);
        let ns = NamespaceKey::derive("t");
        // The engine's rotated rows at positions p + r.
        let mut rotated = payload(&g, seed);
        rotate_block(&g.block_layout(), &mut rotated, p, Direction::Forward).unwrap();
        let mut s = store();
        let sealed = s.seal(&ns, &g, 64, &rotated, PutForm::Rotated { position: p }).unwrap();
        let (read, _) = s.read_payload(&sealed.id, &ns, &g, Some(q)).unwrap();
        let mut direct = rotated.clone();
        rotate_by_delta(&g, &mut direct, q as f64 - p as f64);
        // Latent regions are untouched by either path.
        let layout = g.block_layout();
        for layer in &layout.layers {
            for r in layer.regions.iter().filter(|r| r.kind == RegionKind::Latent) {
                let span = r.offset as usize..(r.offset + r.len) as usize;
                prop_assert_eq!(&read[span.clone()], &rotated[span]);
            }
        }
        for ((w, mag), (v, _)) in rope_values(&g, &read).into_iter().zip(rope_values(&g, &direct)) {
            prop_assert!((w - v).abs() <= ulp_bf16(mag), "{w} vs {v} (pair magnitude {mag})");
        }
    }

    /// Canonical puts of the same content get the same id whatever position each agent
    /// reads it at; reading at q rotates exactly once.
    #[test]
    fn same_content_same_id_at_any_position(seed in any::<u64>(), q in 0u64..1_000_000) {
        let g = tiny_mla(RopeConvention::Interleaved);
        let ns = NamespaceKey::derive("t");
        let canonical = payload(&g, seed);
        let mut s = store();
        let a = s.seal(&ns, &g, 64, &canonical, PutForm::Canonical).unwrap();
        let b = s.seal(&ns, &g, 64, &canonical, PutForm::Canonical).unwrap();
        prop_assert_eq!(a.id, b.id);
        prop_assert_eq!(b.dedup, Dedup::Shared);
        prop_assert_eq!(a.slot, b.slot);
        let (read, _) = s.read_payload(&a.id, &ns, &g, Some(q)).unwrap();
        let mut once = canonical.clone();
        rotate_block(&g.block_layout(), &mut once, q, Direction::Forward).unwrap();
        prop_assert!(read == once, "a read rotates canonical rows once, bit for bit");
    }
}

#[test]
fn canonical_read_returns_stored_bytes() {
    let g = tiny_mla(RopeConvention::HalfSplit);
    let ns = NamespaceKey::derive("t");
    let canonical = payload(&g, 7);
    let mut s = store();
    let a = s.seal(&ns, &g, 64, &canonical, PutForm::Canonical).unwrap();
    assert!(
        s.read_payload(&a.id, &ns, &g, None).unwrap().0 == canonical,
        "canonical bytes back"
    );
    // Position 0 still turns row r by r: only the first row is unchanged.
    let at0 = s.read_payload(&a.id, &ns, &g, Some(0)).unwrap().0;
    assert!(
        at0 != canonical,
        "rows after the first are rotated by their offset"
    );
}

#[test]
fn conventions_differ() {
    let mut a = payload(&tiny_mla(RopeConvention::HalfSplit), 3);
    let mut b = a.clone();
    rotate_block(
        &tiny_mla(RopeConvention::HalfSplit).block_layout(),
        &mut a,
        1000,
        Direction::Forward,
    )
    .unwrap();
    rotate_block(
        &tiny_mla(RopeConvention::Interleaved).block_layout(),
        &mut b,
        1000,
        Direction::Forward,
    )
    .unwrap();
    assert_ne!(a, b, "the two conventions pair different dims");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A model whose cos and sin carry an attention factor: a read scales canonical rows by it,
    /// a rotated put divides it back out (within a bf16 ulp of the pair's magnitude).
    #[test]
    fn the_attention_factor_is_applied_on_read_and_undone_on_put(
        seed in any::<u64>(),
        p in 0u64..200_000,
    ) {
        let mut g = tiny_mla(RopeConvention::Interleaved);
        let Attention::Mla(m) = &mut g.attention else { unreachable!() };
        m.rope.scaling = RopeScaling::Yarn(Yarn {
            factor: 40.0,
            original_max_position: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: Some(1.25),
        });
        let ns = NamespaceKey::derive("t");
        let canonical = payload(&g, seed);
        let mut s = store();
        let a = s.seal(&ns, &g, 64, &canonical, PutForm::Canonical).unwrap();
        let (at_p, _) = s.read_payload(&a.id, &ns, &g, Some(p)).unwrap();
        // Row 0 at position 0 turns by no angle: only the factor applies.
        if p == 0 {
            let layout = g.block_layout();
            let (_, r) = layout.rope_regions().next().unwrap();
            let row = r.offset as usize..r.offset as usize + 8;
            for (x, y) in bf16s(&canonical[row.clone()]).iter().zip(bf16s(&at_p[row])) {
                prop_assert!((y - 1.25 * x).abs() <= ulp_bf16(1.25 * x) / 2.0);
            }
        }
        let back = s.seal(&ns, &g, 64, &at_p, PutForm::Rotated { position: p }).unwrap();
        let (again, _) = s.read_payload(&back.id, &ns, &g, None).unwrap();
        for ((w, mag), (v, _)) in rope_values(&g, &again).into_iter().zip(rope_values(&g, &canonical)) {
            prop_assert!((w - v).abs() <= ulp_bf16(mag), "{w} vs {v} (pair magnitude {mag})");
        }
    }
}
