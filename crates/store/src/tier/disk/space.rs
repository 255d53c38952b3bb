//! Capacity accounting: whether a write fits, which segments can be deleted without moving
//! a live block, and deleting them in an order that a crash cannot turn into a resurrection.
//!
//! The budget is `segment-file bytes + one tombstone per live block ≤ capacity`: the reserve
//! is what lets `free` (and quarantine) always append its tombstone.

use std::collections::HashSet;

use super::segment::SEGMENT_HEADER_LEN;
use super::{DiskTier, ENTRY_HEADER_LEN, ENTRY_PAYLOAD_MAX_BYTES};
use crate::error::StoreError;
use crate::handle::Tier;
use crate::units::ByteCount;

/// What a write must do before appending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// Dead segments to delete, ascending.
    reclaim: Vec<u32>,
    /// Start a new active segment.
    roll: bool,
}

impl DiskTier {
    /// Bytes the budget counts now: segment files plus the tombstone reserve.
    pub(super) fn committed(&self) -> u64 {
        // A pending append becomes a live block: its tombstone is reserved already.
        self.disk_bytes + (self.live.len() as u64 + self.pending_appends) * ENTRY_HEADER_LEN
    }

    /// Largest payload that could ever fit.
    fn payload_max(&self) -> u64 {
        self.config
            .capacity
            .0
            .saturating_sub(SEGMENT_HEADER_LEN + 2 * ENTRY_HEADER_LEN)
            .min(ENTRY_PAYLOAD_MAX_BYTES)
    }

    /// Decides how a `len`-byte block would be written, without side effects. `can_fit` is
    /// exactly `plan(len).is_ok()`, so it never promises what `write` then refuses.
    pub(super) fn plan(&self, len: u64) -> Result<Plan, StoreError> {
        let max = self.payload_max();
        if len > max {
            return Err(StoreError::TooLarge {
                tier: Tier::Disk,
                len: ByteCount(len),
                max: ByteCount(max),
            });
        }
        let cap = self.config.capacity.0;
        let entry = ENTRY_HEADER_LEN + len;
        let committed = self.committed();
        let active_len = self.segments.get(&self.active).map_or(0, |s| s.len);
        let roll =
            active_len > SEGMENT_HEADER_LEN && active_len + entry > self.config.segment_bytes;
        // The entry, the reserve for its tombstone, and a segment header if one is started.
        let need =
            |roll: bool| entry + ENTRY_HEADER_LEN + if roll { SEGMENT_HEADER_LEN } else { 0 };
        if committed + need(roll) <= cap {
            return Ok(Plan {
                reclaim: Vec::new(),
                roll,
            });
        }
        let reclaim = self.deletable();
        let freed: u64 = reclaim
            .iter()
            .filter_map(|n| self.segments.get(n))
            .map(|s| s.len)
            .sum();
        let roll = roll || reclaim.contains(&self.active);
        if committed.saturating_sub(freed) + need(roll) <= cap {
            return Ok(Plan { reclaim, roll });
        }
        Err(StoreError::Full {
            needed: ByteCount(len),
        })
    }

    /// Carries out a plan: deletes dead segments, starts a new active segment if asked.
    pub(super) fn execute(&mut self, plan: Plan) -> Result<(), StoreError> {
        let before = self.disk_bytes;
        let deleted = self.delete_segments(&plan.reclaim);
        self.counters.bytes_reclaimed += before - self.disk_bytes;
        deleted?;
        if plan.roll || !self.segments.contains_key(&self.active) {
            self.new_active()?;
        }
        Ok(())
    }

    /// Segments that can be deleted now without moving a live block or resurrecting a freed
    /// one, ascending. A segment qualifies when it holds no live block and each of its
    /// tombstones is unneeded: every copy of its target is in a segment already chosen (or
    /// in this one). The empty active segment is never chosen (deleting it gains nothing).
    pub(super) fn deletable(&self) -> Vec<u32> {
        let mut gone: HashSet<u32> = HashSet::new();
        let mut out = Vec::new();
        for (&n, seg) in &self.segments {
            if seg.live_count > 0
                || seg.pending > 0
                || (n == self.active && seg.len <= SEGMENT_HEADER_LEN)
            {
                continue;
            }
            let unneeded = seg.tombstones.iter().all(|t| {
                !matches!(self.copies.get(&t.target),
                    Some(at) if at.iter().any(|s| *s != n && !gone.contains(s)))
            });
            if unneeded {
                gone.insert(n);
                out.push(n);
            }
        }
        out
    }

    /// Deletes segments in the given (ascending) order, stopping at the first failure so
    /// that a later segment's tombstones never disappear before the copies they kill.
    pub(super) fn delete_segments(&mut self, numbers: &[u32]) -> Result<(), StoreError> {
        for &n in numbers {
            self.delete_segment(n)?;
        }
        Ok(())
    }

    fn delete_segment(&mut self, n: u32) -> Result<(), StoreError> {
        let Some(seg) = self.segments.get(&n) else {
            return Ok(());
        };
        debug_assert_eq!(seg.live_count, 0, "segment {n} still holds live blocks");
        std::fs::remove_file(&seg.path).map_err(|e| {
            StoreError::io(
                format!("disk tier: delete segment {}", seg.path.display()),
                e,
            )
        })?;
        // Durable before the next deletion: the order is what keeps tombstones sound.
        super::segment::sync_dir(&self.config.dir)?;
        let Some(seg) = self.segments.remove(&n) else {
            return Ok(());
        };
        for seq in &seg.blocks {
            if let Some(at) = self.copies.get_mut(seq) {
                at.retain(|s| *s != n);
                if at.is_empty() {
                    self.copies.remove(seq);
                }
            }
        }
        self.disk_bytes -= seg.len;
        Ok(())
    }
}
