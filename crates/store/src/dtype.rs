//! Element types of block regions and their exact widths in bits.
//!
//! Widths are in bits so that FP4 (half a byte) is exact; a region's byte length is
//! `elements * bits / 8` and must come out whole (checked by the geometry).

use serde::{Deserialize, Serialize};

/// The element type of one region of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// IEEE-754 binary32.
    F32,
    /// bfloat16: 8 exponent bits, 7 mantissa bits.
    Bf16,
    /// IEEE-754 binary16.
    F16,
    /// FP8 E4M3 (OCP), stored as opaque bytes; never rotated.
    Fp8,
    /// FP4 E2M1, two elements per byte; never rotated.
    Fp4,
}

impl Dtype {
    /// Width of one element in bits.
    pub const fn bits(self) -> u64 {
        match self {
            Dtype::F32 => 32,
            Dtype::Bf16 | Dtype::F16 => 16,
            Dtype::Fp8 => 8,
            Dtype::Fp4 => 4,
        }
    }

    /// Whether the fabric can rotate values of this type (RoPE regions must be rotatable).
    pub const fn is_rotatable(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::Bf16 | Dtype::F16)
    }

    /// The lowercase name used in configs and the API.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp4 => "fp4",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
