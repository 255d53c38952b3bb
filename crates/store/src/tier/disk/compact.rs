//! Compaction: rewrite the live entries of mostly-garbage segments into one new segment and
//! delete the old ones, reporting every relocation for the store to apply.
//!
//! Crash safety, step by step: the survivors (verified on the way) and the tombstones that
//! are still needed go to `seg-N.tmp`; it is synced, renamed to `seg-N.kvs` and the directory
//! synced; only then are the sources deleted, oldest first, each deletion synced. A crash
//! before the rename leaves a `.tmp` that open deletes; after it, open finds two
//! byte-identical copies of some entries and serves the one in the highest segment, N.
//! Entries are copied verbatim (same sequence number), so a tombstone written for either
//! copy kills both.

use std::collections::BTreeSet;

use super::report::CompactionReport;
use super::segment::{
    segment_file_name, sync_dir, temp_file_name, Segment, TombstoneRec, SEGMENT_HEADER_LEN,
};
use super::{DiskTier, EntryHeader, LiveEntry, ENTRY_HEADER_LEN};
use crate::error::StoreError;
use crate::handle::RegionIndex;

/// What compaction will write into the new segment.
#[derive(Debug, Default)]
struct Moves {
    /// Live entries to copy, in file order.
    live: Vec<(u64, LiveEntry)>,
    /// Tombstones that must outlive their segment.
    tombstones: Vec<TombstoneRec>,
}

impl DiskTier {
    /// Rewrites the live entries of every segment whose garbage share is at least
    /// [`compact_garbage_ratio`](super::DiskConfig::compact_garbage_ratio) into one new segment
    /// and deletes those segments. Victims are taken most-garbage first while the new segment
    /// fits in the capacity next to the old ones (the peak is on disk at once).
    ///
    /// Returns the relocations the store must apply; an `Err` leaves the tier unchanged.
    pub fn compact(&mut self) -> Result<CompactionReport, StoreError> {
        let victims = self.pick_victims();
        if victims.is_empty() {
            return Ok(CompactionReport::default());
        }
        let before = self.disk_bytes;
        let moves = self.moves(&victims);
        let mut report = CompactionReport::default();
        if !moves.live.is_empty() || !moves.tombstones.is_empty() {
            self.rewrite(moves, &mut report)?;
        }
        for &v in &victims {
            match self.delete_segments(&[v]) {
                Ok(()) => report.segments_removed.push(RegionIndex(v)),
                Err(e) => {
                    // Later victims may hold tombstones for this one's copies: stop here.
                    report.deferred.push(e);
                    break;
                }
            }
        }
        if !self.segments.contains_key(&self.active) {
            if let Err(e) = self.new_active() {
                report.deferred.push(e);
            }
        }
        report.bytes_reclaimed = before.saturating_sub(self.disk_bytes);
        self.counters.compactions += 1;
        self.counters.bytes_reclaimed += report.bytes_reclaimed;
        Ok(report)
    }

    /// Segments worth compacting, ascending, chosen so the new segment fits.
    fn pick_victims(&self) -> BTreeSet<u32> {
        let ratio = self.config.compact_garbage_ratio;
        let mut candidates: Vec<(f64, u32, u64)> = self
            .segments
            .iter()
            .filter(|(&n, s)| s.pending == 0 && !(n == self.active && s.len <= SEGMENT_HEADER_LEN))
            .map(|(&n, s)| {
                // The header counts as garbage: an empty sealed segment is all garbage.
                let garbage = s.len.saturating_sub(s.live_bytes) as f64 / s.len.max(1) as f64;
                let copy = s.live_bytes + s.tombstones.len() as u64 * ENTRY_HEADER_LEN;
                (garbage, n, copy)
            })
            .filter(|(g, _, _)| *g >= ratio)
            .collect();
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut budget = self
            .config
            .capacity
            .0
            .saturating_sub(self.committed())
            .saturating_sub(SEGMENT_HEADER_LEN);
        let mut victims = BTreeSet::new();
        for (_, n, copy) in candidates {
            if copy <= budget {
                budget -= copy;
                victims.insert(n);
            }
        }
        victims
    }

    /// The live entries and still-needed tombstones of the victims.
    fn moves(&self, victims: &BTreeSet<u32>) -> Moves {
        let mut live: Vec<(u64, LiveEntry)> = self
            .live
            .iter()
            .filter(|(_, e)| victims.contains(&e.segment))
            .map(|(&s, e)| (s, *e))
            .collect();
        live.sort_unstable_by_key(|(_, e)| (e.segment, e.offset));
        let mut tombstones = Vec::new();
        for &v in victims {
            let Some(seg) = self.segments.get(&v) else {
                continue;
            };
            for t in &seg.tombstones {
                // Needed while a copy of its target survives v's deletion: one outside the
                // victims, or in a victim deleted after v (deletion is ascending).
                let needed = self
                    .copies
                    .get(&t.target)
                    .is_some_and(|at| at.iter().any(|s| !victims.contains(s) || *s > v));
                if needed {
                    tombstones.push(*t);
                }
            }
        }
        Moves { live, tombstones }
    }

    /// Writes, syncs and installs the new segment; re-points the moved entries.
    fn rewrite(&mut self, moves: Moves, report: &mut CompactionReport) -> Result<(), StoreError> {
        let number = self.next_segment;
        let after = number
            .checked_add(1)
            .ok_or_else(|| StoreError::TierUnavailable {
                tier: crate::handle::Tier::Disk,
                reason: "segment numbers exhausted".into(),
            })?;
        let tmp = self.config.dir.join(temp_file_name(number));
        let mut out = Segment::create(tmp.clone(), number, false)?;
        let written = self.fill(&mut out, &moves);
        let installed = written.and_then(|w| {
            out.sync()?;
            let path = self.config.dir.join(segment_file_name(number));
            std::fs::rename(&tmp, &path).map_err(|e| {
                StoreError::io(format!("disk tier: rename {} into place", tmp.display()), e)
            })?;
            out.path = path;
            sync_dir(&self.config.dir)?;
            Ok(w)
        });
        let (copied, corrupt) = match installed {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        // Committed: the new segment is durable and in place.
        self.next_segment = after;
        self.disk_bytes += out.len;
        out.tombstones = moves.tombstones;
        self.segments.insert(number, out);
        self.active = number;
        for (seq, old, offset) in copied {
            let new = LiveEntry {
                segment: number,
                offset,
                ..old
            };
            self.insert_live(seq, new);
            self.copies.entry(seq).or_default().push(number);
            if let Some(seg) = self.segments.get_mut(&number) {
                seg.blocks.push(seq);
            }
            report.relocations.push((old.handle(seq), new.handle(seq)));
        }
        for (seq, old, tomb) in corrupt {
            self.forget_live(seq);
            self.counters.quarantined += 1;
            if let Some(seg) = self.segments.get_mut(&number) {
                seg.tombstones.push(tomb);
            }
            report.quarantined.push((old.id, old.handle(seq)));
        }
        report.new_segment = Some(RegionIndex(number));
        Ok(())
    }

    /// Copies the moves into `out`, verifying each live entry; a corrupt one is not copied but
    /// gets a tombstone in `out`. Returns `(seq, old, new offset)` copied and
    /// `(seq, old, tombstone)` quarantined.
    #[allow(clippy::type_complexity)]
    fn fill(
        &mut self,
        out: &mut Segment,
        moves: &Moves,
    ) -> Result<
        (
            Vec<(u64, LiveEntry, u64)>,
            Vec<(u64, LiveEntry, TombstoneRec)>,
        ),
        StoreError,
    > {
        let mut copied = Vec::with_capacity(moves.live.len());
        let mut corrupt = Vec::new();
        for &(seq, e) in &moves.live {
            match self.verify_entry(seq, &e)? {
                Ok(payload) => {
                    let offset = out.append(&e.header(seq).encode(), &payload, false)?;
                    copied.push((seq, e, offset));
                }
                Err(_reason) => {
                    let t = TombstoneRec {
                        seq: self.take_seq(),
                        target: seq,
                        id: e.id,
                        namespace: e.namespace,
                    };
                    let h = EntryHeader::tombstone(t.seq, t.target, t.id, t.namespace);
                    out.append(&h.encode(), &[], false)?;
                    corrupt.push((seq, e, t));
                }
            }
        }
        for t in &moves.tombstones {
            let h = EntryHeader::tombstone(t.seq, t.target, t.id, t.namespace);
            out.append(&h.encode(), &[], false)?;
        }
        Ok((copied, corrupt))
    }
}
