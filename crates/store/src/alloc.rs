//! A first-fit range allocator with coalescing, shared by the host and GPU tiers.
//!
//! Invariant (checked by property tests): live allocations never overlap, and
//! `free bytes + allocated bytes == region size`.

use std::collections::BTreeMap;

/// Free-range bookkeeping for one fixed-size region.
#[derive(Debug, Clone)]
pub struct RangeAllocator {
    size: u64,
    /// Free ranges: offset → length, never adjacent (coalesced), never empty.
    free: BTreeMap<u64, u64>,
    /// Live allocations: offset → length.
    live: BTreeMap<u64, u64>,
    /// Every allocation is rounded up to this many bytes (alignment of offsets too).
    align: u64,
}

impl RangeAllocator {
    /// An empty region of `size` bytes whose allocations are aligned to `align` (a power of 2).
    pub fn new(size: u64, align: u64) -> RangeAllocator {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        RangeAllocator {
            size,
            free,
            live: BTreeMap::new(),
            align,
        }
    }

    /// Region size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes allocated (after rounding).
    pub fn allocated(&self) -> u64 {
        self.live.values().sum()
    }

    /// Length an allocation of `len` takes after rounding.
    pub fn rounded(&self, len: u64) -> u64 {
        len.max(1).div_ceil(self.align) * self.align
    }

    /// Whether `len` bytes fit in one free range now.
    pub fn can_fit(&self, len: u64) -> bool {
        let need = self.rounded(len);
        self.free.values().any(|&l| l >= need)
    }

    /// Allocates `len` bytes first-fit; returns the offset.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        let need = self.rounded(len);
        let (&off, &flen) = self.free.iter().find(|(_, &l)| l >= need)?;
        self.free.remove(&off);
        if flen > need {
            self.free.insert(off + need, flen - need);
        }
        self.live.insert(off, need);
        Some(off)
    }

    /// Frees the allocation starting at `offset`; false if there is none.
    pub fn free(&mut self, offset: u64) -> bool {
        let Some(len) = self.live.remove(&offset) else {
            return false;
        };
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&poff, &plen)) = self.free.range(..offset).next_back() {
            if poff + plen == start {
                self.free.remove(&poff);
                start = poff;
            }
        }
        if let Some(&nlen) = self.free.get(&end) {
            self.free.remove(&end);
            end += nlen;
        }
        self.free.insert(start, end - start);
        true
    }

    /// Length of the live allocation at `offset`, if any.
    pub fn live_len(&self, offset: u64) -> Option<u64> {
        self.live.get(&offset).copied()
    }

    /// Checks the invariants; used by tests.
    pub fn check(&self) -> Result<(), String> {
        let mut ranges: Vec<(u64, u64, bool)> = self
            .free
            .iter()
            .map(|(&o, &l)| (o, l, false))
            .chain(self.live.iter().map(|(&o, &l)| (o, l, true)))
            .collect();
        ranges.sort_unstable();
        let mut cursor = 0;
        let mut prev_free = false;
        for (o, l, live) in ranges {
            if o != cursor {
                return Err(format!("gap or overlap at {o} (expected {cursor})"));
            }
            if !live && prev_free {
                return Err(format!("adjacent free ranges at {o}"));
            }
            prev_free = !live;
            cursor = o + l;
        }
        if cursor != self.size {
            return Err(format!("ranges end at {cursor}, region is {}", self.size));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn never_overlaps(ops in proptest::collection::vec((any::<bool>(), 1u64..5000), 1..200)) {
            let mut a = RangeAllocator::new(64 * 1024, 64);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (is_alloc, n) in ops {
                if is_alloc || live.is_empty() {
                    if let Some(off) = a.alloc(n) {
                        let len = a.rounded(n);
                        for &(o, l) in &live {
                            prop_assert!(off + len <= o || o + l <= off, "overlap");
                        }
                        prop_assert_eq!(off % 64, 0);
                        live.push((off, len));
                    } else {
                        prop_assert!(!a.can_fit(n));
                    }
                } else {
                    let (o, _) = live.swap_remove((n as usize) % live.len());
                    prop_assert!(a.free(o));
                }
                prop_assert!(a.check().is_ok(), "{:?}", a.check());
                prop_assert_eq!(a.allocated(), live.iter().map(|(_, l)| l).sum::<u64>());
            }
        }
    }

    #[test]
    fn double_free_is_refused() {
        let mut a = RangeAllocator::new(1024, 8);
        let o = a.alloc(100).unwrap();
        assert!(a.free(o));
        assert!(!a.free(o));
        assert_eq!(a.allocated(), 0);
    }
}
