//! The geometry fingerprint: 16 bytes that name a model's block layout and meaning.
//!
//! blake3 (derive-key mode, context `kvfabric 2026-11 geometry fingerprint v1`) over an
//! explicit canonical encoding, so the value never depends on a serializer's formatting and
//! can be reproduced in any language. Every field that decides a block's bytes or how they are
//! rotated is encoded, and so is the preset name (two models never share blocks or chunk
//! keys, even with equal dimensions). Little-endian throughout:
//!
//! | field | encoding |
//! |---|---|
//! | tag | the 18 bytes `kvfabric-geometry\x01` |
//! | name | u32 length, UTF-8 bytes |
//! | layers, query heads | u32, u32 |
//! | attention | u8: 1 mla, 2 hybrid, 3 gqa; then its fields in declaration order |
//! | integers | u32 (`original_max_position`: u64) |
//! | dtypes | u8: f32 1, bf16 2, f16 3, fp8 4, fp4 5 |
//! | layer schemes | u32 count, then u8 each: csa 1, hca 2, swa 3 |
//! | RoPE | u8 convention (half-split 1, interleaved 2), f64 theta (IEEE bits), u8 scaling (none 0; yarn 1 + f64 factor, u64 original, f64 beta_fast, f64 beta_slow; longrope 3 + u64 original, u64 max position, u32 count + f64 each short factor, u32 count + f64 each long factor), then, only when the attention factor is not 1, u8 0xAF + f64 factor |
//! | hybrid fields | u32 head, rope, indexer and indexer RoPE dims, k1, k2, window; dtypes of RoPE, content, indexer; layer schemes; RoPE of SWA-only layers; RoPE of CSA/HCA layers |
//!
//! (Tag 2 was explicit per-pair factors, replaced by LongRoPE; 0xAF never follows a RoPE whose
//! factor is 1, so presets that predate attention factors keep their fingerprints.)
//!
//! Changing this encoding changes every block id: it is a format version, not a detail.

use super::{Attention, LayerScheme, ModelGeometry};
use crate::dtype::Dtype;
use crate::rope::{RopeConvention, RopeScaling, RopeSpec};

/// Context string of the fingerprint's key derivation.
pub const FINGERPRINT_CONTEXT: &str = "kvfabric 2026-11 geometry fingerprint v1";

/// The canonical bytes the fingerprint hashes.
pub fn canonical_bytes(g: &ModelGeometry) -> Vec<u8> {
    let mut e = Enc(Vec::with_capacity(256));
    e.0.extend_from_slice(b"kvfabric-geometry\x01");
    e.u32(g.name.len() as u32);
    e.0.extend_from_slice(g.name.as_bytes());
    e.u32(g.layers);
    e.u32(g.query_heads);
    match &g.attention {
        Attention::Mla(m) => {
            e.u8(1);
            e.u32(m.kv_lora_rank);
            e.u32(m.rope_dim);
            e.dtype(m.c_kv);
            e.dtype(m.k_rope);
            e.u32(m.mha_head_dim);
            e.rope(&m.rope);
        }
        Attention::Hybrid(h) => {
            e.u8(2);
            for v in [
                h.head_dim,
                h.rope_dim,
                h.indexer_dim,
                h.indexer_rope_dim,
                h.csa_compression,
                h.hca_compression,
                h.swa_window,
            ] {
                e.u32(v);
            }
            e.dtype(h.rope_dtype);
            e.dtype(h.content_dtype);
            e.dtype(h.indexer_dtype);
            e.u32(h.schemes.len() as u32);
            for s in &h.schemes {
                e.u8(match s {
                    LayerScheme::Csa => 1,
                    LayerScheme::Hca => 2,
                    LayerScheme::Swa => 3,
                });
            }
            e.rope(&h.rope);
            e.rope(&h.compressed_rope);
        }
        Attention::Gqa(q) => {
            e.u8(3);
            e.u32(q.kv_heads);
            e.u32(q.head_dim);
            e.dtype(q.dtype);
        }
    }
    e.0
}

/// The 16-byte fingerprint of `g`.
pub fn fingerprint(g: &ModelGeometry) -> [u8; 16] {
    let full = blake3::derive_key(FINGERPRINT_CONTEXT, &canonical_bytes(g));
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    fn dtype(&mut self, d: Dtype) {
        self.u8(match d {
            Dtype::F32 => 1,
            Dtype::Bf16 => 2,
            Dtype::F16 => 3,
            Dtype::Fp8 => 4,
            Dtype::Fp4 => 5,
        });
    }
    fn rope(&mut self, r: &RopeSpec) {
        self.u8(match r.convention {
            RopeConvention::HalfSplit => 1,
            RopeConvention::Interleaved => 2,
        });
        self.f64(r.theta);
        match &r.scaling {
            RopeScaling::None => self.u8(0),
            RopeScaling::Yarn(y) => {
                self.u8(1);
                self.f64(y.factor);
                self.u64(y.original_max_position);
                self.f64(y.beta_fast);
                self.f64(y.beta_slow);
            }
            RopeScaling::LongRope(l) => {
                self.u8(3);
                self.u64(l.original_max_position);
                self.u64(l.max_position);
                for set in [&l.short_factors, &l.long_factors] {
                    self.u32(set.len() as u32);
                    for x in set {
                        self.f64(*x);
                    }
                }
            }
        }
        let factor = r.attention_factor();
        if factor != 1.0 {
            self.u8(0xAF);
            self.f64(factor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::preset::builtin_preset;

    /// Pinned: a change here is a format break (every block id and chunk key changes).
    #[test]
    fn deepseek_v3_fingerprint_is_pinned() {
        let g = builtin_preset("deepseek-v3").expect("preset");
        let hex: String = fingerprint(&g).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, PINNED_V3);
    }

    #[test]
    fn every_field_changes_the_fingerprint() {
        let g = builtin_preset("deepseek-v3").expect("preset");
        let base = fingerprint(&g);
        let mut renamed = g.clone();
        renamed.name.push('x');
        assert_ne!(fingerprint(&renamed), base);
        let mut layers = g.clone();
        layers.layers += 1;
        assert_ne!(fingerprint(&layers), base);
        let mut theta = g.clone();
        if let Attention::Mla(m) = &mut theta.attention {
            m.rope.theta += 1.0;
        }
        assert_ne!(fingerprint(&theta), base);
    }

    /// Pinned too: a LongRoPE preset and a hybrid one (their encodings are the newest).
    #[test]
    fn minicpm3_and_v4_pro_fingerprints_are_pinned() {
        for (name, pinned) in [
            ("minicpm3-4b", PINNED_MINICPM3),
            ("deepseek-v4-pro", PINNED_V4_PRO),
        ] {
            let g = builtin_preset(name).expect("preset");
            let hex: String = fingerprint(&g).iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, pinned, "{name}");
        }
    }

    const PINNED_V3: &str = "de4c002b68499870e08f4b56b6a329b7";
    const PINNED_MINICPM3: &str = "7f39521332a95cb453c459f76ec23362";
    const PINNED_V4_PRO: &str = "7510ad2758ee8e4015a03c1730d8994f";
}
