//! Tiers and handles: where a block's bytes live, without a raw address.
//!
//! A [`Handle`] is `{tier, region, offset, len, generation}`: `region` indexes a table that the
//! tier owns, and the tier checks `generation` on every use, so a handle outliving its
//! allocation is refused rather than read. No pointer leaves a tier; two live handles of one
//! tier never overlap (the allocator's invariant, checked by property tests).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::units::ByteCount;

/// A storage tier, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Device memory (cudarc, `cuda` feature).
    Gpu,
    /// Host RAM arena.
    Host,
    /// Append-only segment files.
    Disk,
}

impl Tier {
    /// Lowercase name used in the API and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Tier::Gpu => "gpu",
            Tier::Host => "host",
            Tier::Disk => "disk",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Index into a tier's region table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionIndex(pub u32);

/// Where one block's bytes live inside one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    /// The tier that owns the region table.
    pub tier: Tier,
    /// Region (host arena chunk, device allocation, disk segment).
    pub region: RegionIndex,
    /// Byte offset inside the region.
    pub offset: u64,
    /// Byte length.
    pub len: ByteCount,
    /// Allocation generation, checked by the tier on every use.
    pub generation: u64,
}

impl Handle {
    /// End offset (exclusive) inside the region.
    pub fn end(&self) -> u64 {
        self.offset + self.len.0
    }

    /// Whether two handles share any byte.
    pub fn overlaps(&self, other: &Handle) -> bool {
        self.tier == other.tier
            && self.region == other.region
            && self.offset < other.end()
            && other.offset < self.end()
    }
}
