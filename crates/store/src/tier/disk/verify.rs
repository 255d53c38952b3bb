//! Checking bytes against ids: verified reads, quarantine, and [`DiskTier::scrub`].
//!
//! A quarantined entry leaves the index at once (its handles turn invalid), is counted, and
//! gets a tombstone so that a reopen does not bring it back.

use super::report::ScrubReport;
use super::{DiskTier, LiveEntry, ENTRY_HEADER_LEN};
use crate::error::StoreError;
use crate::handle::Handle;
use crate::id::BlockId;
use crate::units::ByteCount;

impl DiskTier {
    /// Reads entry `seq`'s payload and returns it only if it hashes to the entry's id;
    /// otherwise quarantines the entry and returns [`StoreError::Corrupt`].
    pub(super) fn read_verified(&mut self, seq: u64, e: &LiveEntry) -> Result<Vec<u8>, StoreError> {
        let seg = self.segment_of(e)?;
        let (bytes, found) =
            seg.file()
                .read_hashed(e.offset + ENTRY_HEADER_LEN, e.len, &e.namespace)?;
        if found != e.id {
            return Err(
                self.quarantine(seq, format!("payload hashes to {found}, expected {}", e.id))
            );
        }
        Ok(bytes)
    }

    fn segment_of(&self, e: &LiveEntry) -> Result<&super::Segment, StoreError> {
        self.segments.get(&e.segment).ok_or_else(|| {
            Self::invalid(format!("segment {} of a live entry is missing", e.segment))
        })
    }

    /// Reads entry `seq`'s header back and checks it is the one the index expects.
    fn check_header(&self, seq: u64, e: &LiveEntry) -> Result<Result<(), String>, StoreError> {
        let seg = self.segment_of(e)?;
        let mut hb = [0u8; super::EntryHeader::serialized_len()];
        seg.read_at(&mut hb, e.offset)?;
        let expected = e.header(seq);
        Ok(match super::EntryHeader::decode(&hb) {
            Ok(h) if h == expected => Ok(()),
            Ok(h) => Err(format!(
                "header changed on disk: expected {expected:?}, found {h:?}"
            )),
            Err(err) => Err(err.to_string()),
        })
    }

    /// Verifies entry `seq` (header and payload) in full. `Ok(Err(reason))` is a mismatch.
    pub(super) fn verify_entry(
        &self,
        seq: u64,
        e: &LiveEntry,
    ) -> Result<Result<Vec<u8>, String>, StoreError> {
        if let Err(reason) = self.check_header(seq, e)? {
            return Ok(Err(reason));
        }
        let seg = self.segment_of(e)?;
        let (bytes, found) =
            seg.file()
                .read_hashed(e.offset + ENTRY_HEADER_LEN, e.len, &e.namespace)?;
        if found != e.id {
            return Ok(Err(format!("payload hashes to {found}, expected {}", e.id)));
        }
        Ok(Ok(bytes))
    }

    /// Drops live entry `seq` from the index, counts it, tombstones it (best effort: if the
    /// append fails the entry is still never served in this process) and returns the
    /// [`StoreError::Corrupt`] that names it.
    pub(super) fn quarantine(&mut self, seq: u64, reason: String) -> StoreError {
        let Some(e) = self.forget_live(seq) else {
            return Self::invalid(format!("no live entry of generation {seq} to quarantine"));
        };
        self.counters.quarantined += 1;
        let segment = self
            .segments
            .get(&e.segment)
            .map(|s| s.path.clone())
            .unwrap_or_default();
        let _ = self.append_tombstone(seq, &e);
        StoreError::Corrupt {
            id: e.id,
            segment,
            offset: e.offset,
            reason,
        }
    }

    /// Verifies every live entry (header and payload), in file order. Mismatches are
    /// quarantined and listed; entries that cannot be read stay live and are listed as errors.
    pub fn scrub(&mut self) -> ScrubReport {
        let mut todo: Vec<(u64, LiveEntry)> = self.live.iter().map(|(&s, e)| (s, *e)).collect();
        todo.sort_unstable_by_key(|(_, e)| (e.segment, e.offset));
        let mut report = ScrubReport::default();
        for (seq, e) in todo {
            match self.verify_entry(seq, &e) {
                Ok(Ok(bytes)) => {
                    report.entries_verified += 1;
                    report.bytes_verified = report.bytes_verified + ByteCount(bytes.len() as u64);
                }
                Ok(Err(reason)) => {
                    let handle: Handle = e.handle(seq);
                    let id: BlockId = e.id;
                    let _corrupt = self.quarantine(seq, reason);
                    report.quarantined.push((id, handle));
                }
                Err(io) => report.errors.push(io),
            }
        }
        report
    }
}
