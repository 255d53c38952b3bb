//! The host tier: a capacity-bounded arena of fixed-size regions in RAM.
//!
//! Regions are allocated lazily up to the capacity; blocks are placed first-fit inside a
//! region by the shared [`RegionBook`], so live blocks never alias. A handle carries the region
//! index and the allocation's generation; a stale or foreign handle is refused.
//!
//! Regions are shared ([`RegionBuf`] behind an `Arc`) so that a reservation can be filled and
//! a pinned block read without the store (see [`host_region`](super::host_region) for who may
//! touch which bytes).

use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::id::{BlockId, NamespaceKey};
use crate::tier::host_region::RegionBuf;
use crate::tier::regions::RegionBook;
use crate::tier::TierBackend;
use crate::units::ByteCount;
use std::sync::Arc;

/// Default region size: 256 MiB (56 DeepSeek-V3 bf16 blocks).
pub const REGION_BYTES_DEFAULT: u64 = 256 << 20;
/// Copy granularity of [`HostTier::write_parts_with`]: fits in L2 with room to spare.
pub const COPY_CHUNK_BYTES: usize = 64 << 10;

/// Host RAM tier.
pub struct HostTier {
    book: RegionBook,
    buffers: Vec<Arc<RegionBuf>>,
}

impl HostTier {
    /// A host tier of `capacity` bytes in regions of at most `region_bytes`.
    pub fn new(capacity: ByteCount, region_bytes: u64) -> HostTier {
        HostTier {
            book: RegionBook::new(Tier::Host, capacity, region_bytes),
            buffers: Vec::new(),
        }
    }

    /// Writes `parts` back to back into one allocation, calling `on_chunk` with each source
    /// chunk (at most [`COPY_CHUNK_BYTES`]) right after copying it, while it is still in cache.
    ///
    /// This lets sealing hash and copy in one pass over the payload instead of two.
    pub fn write_parts_with(
        &mut self,
        parts: &[&[u8]],
        on_chunk: &mut dyn FnMut(&[u8]),
    ) -> Result<Handle, StoreError> {
        let len = ByteCount(parts.iter().map(|p| p.len() as u64).sum());
        let h = self.allocate(len)?;
        let buf = self.view_mut(&h)?;
        let mut at = 0;
        for part in parts {
            for chunk in part.chunks(COPY_CHUNK_BYTES) {
                buf[at..at + chunk.len()].copy_from_slice(chunk);
                on_chunk(chunk);
                at += chunk.len();
            }
        }
        Ok(h)
    }

    /// Allocates `len` bytes without writing them (a reservation filled in place).
    pub fn allocate(&mut self, len: ByteCount) -> Result<Handle, StoreError> {
        let placement = self.book.allocate(len)?;
        if let Some(size) = placement.new_region_bytes {
            self.buffers
                .push(Arc::new(RegionBuf::zeroed(size as usize)));
        }
        Ok(placement.handle)
    }

    /// Borrows the bytes at `handle` for writing in place (a reservation being filled).
    pub fn view_mut(&mut self, handle: &Handle) -> Result<&mut [u8], StoreError> {
        self.book.check(handle)?;
        let buf = &self.buffers[handle.region.0 as usize];
        // SAFETY: `&mut self` excludes every other access through this tier, and the handle is
        // live: a fresh allocation, a reservation handed back to the store, or a slot, none
        // of which is read or written outside the store while the store works on it.
        Ok(unsafe { buf.slice_mut(handle.offset as usize, handle.len.as_usize()) })
    }

    /// Borrows the bytes at `handle` without copying (for in-place comparison). The borrow
    /// ends before the tier can change, so no address escapes.
    pub fn view(&self, handle: &Handle) -> Result<&[u8], StoreError> {
        self.book.check(handle)?;
        let buf = &self.buffers[handle.region.0 as usize];
        // SAFETY: the handle is live and not a reservation being filled (the store never views
        // one), so nobody writes these bytes while the borrow of `self` lasts.
        Ok(unsafe { buf.slice(handle.offset as usize, handle.len.as_usize()) })
    }

    /// The region behind a live handle, for work on its bytes outside the store (a reservation
    /// being filled, a pinned block being read).
    pub(crate) fn region(&self, handle: &Handle) -> Result<Arc<RegionBuf>, StoreError> {
        self.book.check(handle)?;
        Ok(Arc::clone(&self.buffers[handle.region.0 as usize]))
    }
}

impl TierBackend for HostTier {
    fn tier(&self) -> Tier {
        Tier::Host
    }

    fn capacity(&self) -> ByteCount {
        self.book.capacity()
    }

    fn used(&self) -> ByteCount {
        self.book.used()
    }

    fn can_fit(&self, len: ByteCount) -> bool {
        self.book.can_fit(len)
    }

    fn write(
        &mut self,
        _id: &BlockId,
        _namespace: &NamespaceKey,
        bytes: &[u8],
    ) -> Result<Handle, StoreError> {
        self.write_parts_with(&[bytes], &mut |_| {})
    }

    fn read(&mut self, handle: &Handle, _id: &BlockId) -> Result<Vec<u8>, StoreError> {
        Ok(self.view(handle)?.to_vec())
    }

    fn free(&mut self, handle: &Handle) -> Result<(), StoreError> {
        self.book.release(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_conformance() {
        crate::tier::conformance::run(&mut || HostTier::new(ByteCount(1 << 20), 256 << 10));
    }
}
