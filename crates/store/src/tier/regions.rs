//! Region bookkeeping shared by the memory tiers (host and GPU): a capacity split into
//! lazily created regions, first-fit placement inside each, and a generation per allocation
//! so stale or forged handles are refused. The tiers own the bytes; this owns the ledger.

use std::collections::HashMap;

use crate::alloc::RangeAllocator;
use crate::error::StoreError;
use crate::handle::{Handle, RegionIndex, Tier};
use crate::units::ByteCount;

/// Allocation alignment inside a region.
pub const ALIGN_BYTES: u64 = 64;

struct Region {
    alloc: RangeAllocator,
    /// offset → generation of the live allocation there.
    generations: HashMap<u64, u64>,
}

/// Where a new allocation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The handle of the new allocation.
    pub handle: Handle,
    /// Set when a new region of this many bytes was opened for it (the tier must back it).
    pub new_region_bytes: Option<u64>,
}

/// The allocation ledger of one memory tier.
pub struct RegionBook {
    tier: Tier,
    capacity: u64,
    region_bytes: u64,
    regions: Vec<Region>,
    next_generation: u64,
}

impl RegionBook {
    /// A ledger for `capacity` bytes in regions of at most `region_bytes`.
    pub fn new(tier: Tier, capacity: ByteCount, region_bytes: u64) -> RegionBook {
        let region_bytes = region_bytes.min(capacity.0).max(ALIGN_BYTES);
        RegionBook {
            tier,
            capacity: capacity.0,
            region_bytes,
            regions: Vec::new(),
            next_generation: 1,
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> ByteCount {
        ByteCount(self.capacity)
    }

    /// Bytes allocated to live blocks (after alignment).
    pub fn used(&self) -> ByteCount {
        ByteCount(self.regions.iter().map(|r| r.alloc.allocated()).sum())
    }

    fn next_region_size(&self) -> u64 {
        let reserved: u64 = self.regions.iter().map(|r| r.alloc.size()).sum();
        self.region_bytes.min(self.capacity - reserved)
    }

    /// Whether `len` bytes can be allocated now.
    pub fn can_fit(&self, len: ByteCount) -> bool {
        self.regions.iter().any(|r| r.alloc.can_fit(len.0))
            || RangeAllocator::new(self.next_region_size(), ALIGN_BYTES).can_fit(len.0)
    }

    /// Allocates `len` bytes, opening a region if needed.
    pub fn allocate(&mut self, len: ByteCount) -> Result<Placement, StoreError> {
        if RangeAllocator::new(self.region_bytes, ALIGN_BYTES).rounded(len.0) > self.region_bytes {
            return Err(StoreError::TooLarge {
                tier: self.tier,
                len,
                max: ByteCount(self.region_bytes),
            });
        }
        let mut new_region_bytes = None;
        let index = match self.regions.iter().position(|r| r.alloc.can_fit(len.0)) {
            Some(i) => i,
            None => {
                let size = self.next_region_size();
                if !RangeAllocator::new(size, ALIGN_BYTES).can_fit(len.0) {
                    return Err(StoreError::Full { needed: len });
                }
                self.regions.push(Region {
                    alloc: RangeAllocator::new(size, ALIGN_BYTES),
                    generations: HashMap::new(),
                });
                new_region_bytes = Some(size);
                self.regions.len() - 1
            }
        };
        let generation = self.next_generation;
        self.next_generation += 1;
        let region = &mut self.regions[index];
        let offset = region.alloc.alloc(len.0).expect("can_fit was checked");
        region.generations.insert(offset, generation);
        let handle = Handle {
            tier: self.tier,
            region: RegionIndex(index as u32),
            offset,
            len,
            generation,
        };
        Ok(Placement {
            handle,
            new_region_bytes,
        })
    }

    /// Undoes an allocation whose region could not be backed (e.g. device out of memory).
    pub fn abandon_region(&mut self, placement: &Placement) {
        if placement.new_region_bytes.is_some()
            && placement.handle.region.0 as usize == self.regions.len() - 1
        {
            self.regions.pop();
        } else {
            let _ = self.release(&placement.handle);
        }
    }

    /// Checks that `h` names a live allocation of this tier.
    pub fn check(&self, h: &Handle) -> Result<(), StoreError> {
        let invalid = |reason: String| StoreError::InvalidHandle {
            tier: self.tier,
            reason,
        };
        if h.tier != self.tier {
            return Err(invalid(format!("handle belongs to the {} tier", h.tier)));
        }
        let r = self
            .regions
            .get(h.region.0 as usize)
            .ok_or_else(|| invalid(format!("no region {}", h.region.0)))?;
        match (r.generations.get(&h.offset), r.alloc.live_len(h.offset)) {
            (Some(&g), Some(len)) if g == h.generation && len >= h.len.0 => Ok(()),
            _ => Err(invalid(format!(
                "no live allocation at region {} offset {} generation {}",
                h.region.0, h.offset, h.generation
            ))),
        }
    }

    /// Releases the allocation at `h`.
    pub fn release(&mut self, h: &Handle) -> Result<(), StoreError> {
        self.check(h)?;
        let r = &mut self.regions[h.region.0 as usize];
        r.generations.remove(&h.offset);
        r.alloc.free(h.offset);
        Ok(())
    }
}
