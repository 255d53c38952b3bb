//! [`RegionBuf`]: one host-arena region, shared (by `Arc`) between the host tier and the
//! reservations and pinned reads that work on its bytes outside the store owner's lock.
//!
//! Who may touch which bytes is decided by the region ledger, never by this type: a
//! reservation's range is written only by its [`Reservation`](crate::Reservation) (which the
//! ledger gave that range, and which no slot or other reservation overlaps); a live slot's
//! range is never written after it was sealed and is read outside the lock only while the slot
//! is pinned (a pinned slot is never freed or moved). Inside the lock the host tier reads and
//! writes through `&self` / `&mut self` as before. Those rules make every access below
//! exclusive for writes and shared for reads.

use std::cell::UnsafeCell;

/// The bytes of one region.
pub(crate) struct RegionBuf {
    bytes: Box<[UnsafeCell<u8>]>,
}

// SAFETY: the region is plain bytes; concurrent access follows the ledger's rules in the
// module docs (one writer per range, readers only of ranges nobody writes).
unsafe impl Sync for RegionBuf {}

impl RegionBuf {
    /// A zeroed region of `len` bytes (the allocator hands out zeroed pages lazily).
    pub(crate) fn zeroed(len: usize) -> RegionBuf {
        let bytes: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        // SAFETY: `UnsafeCell<u8>` has the same layout as `u8` (repr(transparent)).
        let bytes = unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<u8>]) };
        RegionBuf { bytes }
    }

    /// Region length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    fn ptr(&self, start: usize, len: usize) -> *mut u8 {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.len()),
            "range {start}+{len} outside a region of {} bytes",
            self.len()
        );
        // UnsafeCell::raw_get keeps the provenance of the whole slice.
        UnsafeCell::raw_get(self.bytes.as_ptr()).wrapping_add(start)
    }

    /// Shared view of `start..start + len`.
    ///
    /// # Safety
    /// Nobody may write the range while the returned slice lives.
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &[u8] {
        // SAFETY: in bounds (checked); no writer, by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr(start, len), len) }
    }

    /// Exclusive view of `start..start + len`.
    ///
    /// # Safety
    /// Nobody else may read or write the range while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, start: usize, len: usize) -> &mut [u8] {
        // SAFETY: in bounds (checked); exclusive, by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(start, len), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_region_is_zeroed_and_bounded() {
        let r = RegionBuf::zeroed(4096);
        // SAFETY: nothing else uses this region.
        unsafe {
            assert!(r.slice(0, 4096).iter().all(|b| *b == 0));
            r.slice_mut(100, 4).copy_from_slice(&[1, 2, 3, 4]);
            assert_eq!(r.slice(99, 6), &[0, 1, 2, 3, 4, 0]);
        }
        let out_of_bounds = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the call panics before any slice exists.
            let _ = unsafe { r.slice(4000, 97) };
        }));
        assert!(out_of_bounds.is_err(), "a range past the end is refused");
    }
}
