//! Helpers shared by the store's integration tests.
#![allow(dead_code, unreachable_pub)]

use kvfabric_store::geometry::{Attention, MlaGeometry, ModelGeometry};
use kvfabric_store::rope::{RopeConvention, RopeScaling, RopeSpec};
use kvfabric_store::Dtype;

/// A small MLA geometry (2 layers, latent 8, rope 4) so tests stay fast.
pub fn tiny_mla(convention: RopeConvention) -> ModelGeometry {
    ModelGeometry {
        name: format!("tiny-mla-{convention:?}"),
        layers: 2,
        query_heads: 4,
        attention: Attention::Mla(MlaGeometry {
            kv_lora_rank: 8,
            rope_dim: 4,
            c_kv: Dtype::Bf16,
            k_rope: Dtype::Bf16,
            mha_head_dim: 16,
            rope: RopeSpec {
                convention,
                theta: 10000.0,
                scaling: RopeScaling::None,
            },
        }),
    }
}

/// Deterministic bytes (xorshift) that decode to finite bf16 values of moderate magnitude.
pub fn payload(geometry: &ModelGeometry, seed: u64) -> Vec<u8> {
    let len = geometry.block_layout().payload_len as usize;
    let mut out = Vec::with_capacity(len);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Uniform in [-4, 4): finite, never NaN or Inf in bf16.
        let v = ((x >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
        out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A 2-bit id hash (four ids in all): id collisions on most seals, so "dedup never merges
/// different bytes" is exercised on every run.
pub struct WeakIds;

/// [`WeakIds`]' stream.
pub struct WeakStream(kvfabric_store::StreamingId);

impl kvfabric_store::IdHasher for WeakIds {
    fn begin(&self, key: &kvfabric_store::NamespaceKey) -> Box<dyn kvfabric_store::IdStream> {
        Box::new(WeakStream(kvfabric_store::StreamingId::new(key)))
    }
}

impl kvfabric_store::IdStream for WeakStream {
    fn update(&mut self, b: &[u8]) {
        self.0.update(b);
    }
    fn finish(&self) -> kvfabric_store::BlockId {
        let mut id = [0u8; 32];
        id[0] = self.0.finalize().0[0] & 3;
        kvfabric_store::BlockId(id)
    }
}
