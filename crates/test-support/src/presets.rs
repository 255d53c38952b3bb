//! Model presets and payloads for tests: a tiny MLA model (blocks of 6,144 payload bytes, so a
//! test moves many on two cores), the built-in presets, and deterministic payloads that decode
//! to finite bf16 values.

use kvfabric_store::ModelGeometry;

/// The tiny MLA model's name.
pub const TINY_NAME: &str = "tiny-mla";
/// Tokens per block of the tiny model.
pub const TINY_TOKENS: u32 = 64;
/// Payload bytes per block of the tiny model: 2 layers × 64 tokens × (16 + 8) dims × 2 B.
pub const TINY_PAYLOAD_BYTES: usize = 6144;
/// The tiny model's preset file.
pub const TINY_TOML: &str = r#"
[model]
name = "tiny-mla"
kind = "mla"
layers = 2
query_heads = 4
[mla]
kv_lora_rank = 16
rope_dim = 8
mha_head_dim = 16
[precision]
c_kv = "bf16"
k_rope = "bf16"
[rope]
convention = "interleaved"
theta = 10000.0
"#;

/// The tiny geometry, parsed by the store as a node parses it.
pub fn tiny() -> ModelGeometry {
    ModelGeometry::from_toml("<test>/tiny-mla.toml", TINY_TOML).expect("the tiny preset parses")
}

/// A built-in preset, as a node's models directory holds it.
pub fn builtin(name: &str) -> ModelGeometry {
    kvfabric_store::geometry::preset::builtin_preset(name).expect("a built-in preset")
}

/// Deterministic bytes of one block of `g` that decode to finite bf16 values in [-4, 4].
pub fn payload(g: &ModelGeometry, seed: u64) -> Vec<u8> {
    let len = g.block_layout().payload_len as usize;
    let mut out = Vec::with_capacity(len);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = ((x >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
        out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tiny_model_has_the_sizes_its_constants_say() {
        let g = tiny();
        assert_eq!(g.name, TINY_NAME);
        assert_eq!(g.block_tokens(), TINY_TOKENS);
        assert_eq!(payload(&g, 1).len(), TINY_PAYLOAD_BYTES);
        assert_ne!(payload(&g, 1), payload(&g, 2));
    }
}
