//! The disk tier: append-only segment files in one directory, an in-memory index rebuilt at
//! open, and a check of every byte against its id on the way out.
//!
//! Owns: the on-disk format below, crash recovery (`recover.rs`), capacity accounting and the
//! deletion of dead segments (`space.rs`), compaction (`compact.rs`), verified reads, quarantine
//! and scrubbing (`verify.rs`). Never: moves a live entry except in [`DiskTier::compact`]
//! (whose relocations the store applies), serves bytes that do not hash to their id, keeps
//! block bytes in RAM, or lets two processes use one directory (an `flock` on `LOCK`).
//!
//! # Files
//!
//! The directory holds `seg-NNNNNNNN.kvs` segments (the number, zero-padded decimal, is the
//! handle's region index), `seg-NNNNNNNN.tmp` while compaction writes a segment (deleted at
//! open: it was never renamed into place, so it holds nothing not held elsewhere), and `LOCK`.
//! Appends go to the highest-numbered segment; a segment is sealed once the next block would
//! take it past [`DiskConfig::segment_bytes`].
//!
//! # Segment format
//!
//! All integers little-endian. Entries follow the header back to back, without padding.
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 8 | magic `KVFSSEG1` |
//! | 8 | 2 | version, `u16` = 1 |
//! | 10 | 2 | reserved, zero |
//! | 12 | 4 | segment number, `u32` (equals the file name's) |
//! | 16 | 8 | reserved, zero |
//! | 24 | 8 | checksum: first 8 bytes of blake3(bytes 0..24), as `u64` |
//! | 32 | … | entries |
//!
//! # Entry format
//!
//! A fixed header of [`EntryHeader::serialized_len`] = 104 bytes, then the payload.
//!
//! | offset | width | field |
//! |---|---|---|
//! | 0 | 4 | magic `KVFE` |
//! | 4 | 2 | version, `u16` = 1 |
//! | 6 | 1 | kind: 1 = block, 2 = tombstone |
//! | 7 | 1 | reserved, zero |
//! | 8 | 8 | sequence number, `u64` (≥ 1, unique, never reused; a handle's generation) |
//! | 16 | 8 | target, `u64`: a tombstone's freed sequence number (< its own); 0 for a block |
//! | 24 | 8 | payload length, `u64` (≤ 2³²; 0 for a tombstone) |
//! | 32 | 32 | block id |
//! | 64 | 32 | namespace key |
//! | 96 | 8 | header checksum: first 8 bytes of blake3(bytes 0..96), as `u64` |
//! | 104 | length | payload: the block's bytes |
//!
//! The payload's checksum is the id itself: `blake3_keyed(namespace, payload) == id`.
//! A tombstone names the id and namespace of the block it frees (for diagnosis).
//!
//! # Recovery
//!
//! Open scans every segment's entry headers and seeks over payloads; only the last entry of
//! each segment is read in full, since only an append in progress can be torn. An entry that
//! runs past the end of its file is a torn tail: the file is cut before it (nothing after it
//! is served), right after the last whole entry (so bytes skipped just before it go too). A header that fails its checksum is skipped by searching forward for the next
//! valid magic + checksum (resync), so later entries survive. Every other payload is
//! verified on [`read`](TierBackend::read), [`scrub`](DiskTier::scrub) and compaction; one
//! that does not match is quarantined (dropped from the index, counted, tombstoned so that it
//! stays dropped after a reopen). A block is live unless some tombstone targets its sequence
//! number; of several copies of one entry (compaction interrupted before deleting its
//! sources), the one in the highest segment is served: copies are byte-identical, headers
//! included.
//!
//! # Capacity
//!
//! `capacity` bounds the bytes of all segment files, and room for one tombstone per live block
//! is kept in reserve so that [`free`](TierBackend::free) never fails for lack of space. A
//! write that does not fit first deletes segments holding no live block (oldest first, and a
//! segment holding a tombstone only after every segment with a copy of its target is gone,
//! so a crash mid-way never resurrects a freed block); it never moves a live block.

mod append;
mod compact;
mod config;
mod entry;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod recover;
mod report;
mod segment;
mod space;
mod verify;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

pub use append::{DiskAppend, SegmentRead};
pub use config::{DiskConfig, SyncPolicy, COMPACT_GARBAGE_RATIO_DEFAULT, SEGMENT_BYTES_DEFAULT};
pub use entry::{
    EntryDecodeError, EntryHeader, EntryKind, ENTRY_HEADER_LEN, ENTRY_MAGIC,
    ENTRY_PAYLOAD_MAX_BYTES, ENTRY_VERSION,
};
pub use report::{CompactionReport, DiskCounters, RecoveredEntry, ScrubReport};

use crate::error::StoreError;
use crate::handle::{Handle, RegionIndex, Tier};
use crate::hash_parallel::TWO_THREADS_MIN_BYTES;
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};
use crate::tier::TierBackend;
use crate::units::ByteCount;
use segment::{segment_file_name, sync_dir, Segment, TombstoneRec};

/// Where a live block's index copy sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LiveEntry {
    segment: u32,
    /// Offset of the entry header in the segment (the payload follows it).
    offset: u64,
    /// Payload bytes.
    len: u64,
    id: BlockId,
    namespace: NamespaceKey,
}

impl LiveEntry {
    fn handle(&self, seq: u64) -> Handle {
        Handle {
            tier: Tier::Disk,
            region: RegionIndex(self.segment),
            offset: self.offset + ENTRY_HEADER_LEN,
            len: ByteCount(self.len),
            generation: seq,
        }
    }

    fn entry_bytes(&self) -> u64 {
        ENTRY_HEADER_LEN + self.len
    }

    fn header(&self, seq: u64) -> EntryHeader {
        EntryHeader::block(seq, self.id, self.namespace, self.len)
    }
}

/// The disk tier.
#[derive(Debug)]
pub struct DiskTier {
    config: DiskConfig,
    /// Holds the `flock` on `LOCK` for as long as the tier lives.
    _lock: File,
    segments: BTreeMap<u32, Segment>,
    /// The segment appends go to: always present, always the highest-numbered.
    active: u32,
    next_segment: u32,
    /// Live blocks by sequence number (= handle generation).
    live: HashMap<u64, LiveEntry>,
    /// Sequence number → segments holding a copy of that block entry, live or dead; decides
    /// which tombstones are still needed.
    copies: HashMap<u64, Vec<u32>>,
    next_seq: u64,
    /// Bytes of all segment files.
    disk_bytes: u64,
    /// Entry bytes of live blocks.
    live_bytes: u64,
    /// Appends reserved and being written outside the lock ([`append`]).
    pending_appends: u64,
    counters: DiskCounters,
}

fn lock_dir(config: &DiskConfig) -> Result<File, StoreError> {
    let path = config.dir.join("LOCK");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io(format!("disk tier: open {}", path.display()), e))?;
    // SAFETY: flock on a descriptor we own for the duration of the call; no memory involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StoreError::TierUnavailable {
            tier: Tier::Disk,
            reason: format!(
                "{} is locked by another disk tier ({})",
                config.dir.display(),
                std::io::Error::last_os_error()
            ),
        });
    }
    Ok(file)
}

impl DiskTier {
    /// Opens (creating if needed) the tier in `config.dir`, recovers its index, and returns
    /// every live block for the store to rebuild its slots, in write order.
    pub fn open(config: DiskConfig) -> Result<(DiskTier, Vec<RecoveredEntry>), StoreError> {
        config.validate()?;
        std::fs::create_dir_all(&config.dir).map_err(|e| {
            StoreError::io(
                format!("disk tier: create directory {}", config.dir.display()),
                e,
            )
        })?;
        let lock = lock_dir(&config)?;
        let mut counters = DiskCounters::default();
        let rec = recover::recover(&config.dir, &mut counters)?;
        let disk_bytes = rec.segments.values().map(|s| s.len).sum();
        let live_bytes = rec.live.values().map(LiveEntry::entry_bytes).sum();
        let mut tier = DiskTier {
            _lock: lock,
            active: rec.segments.keys().next_back().copied().unwrap_or(0),
            next_segment: rec.next_segment,
            segments: rec.segments,
            live: rec.live,
            copies: rec.copies,
            next_seq: rec.next_seq,
            disk_bytes,
            live_bytes,
            pending_appends: 0,
            counters,
            config,
        };
        if tier.segments.is_empty() {
            tier.new_active()?;
        }
        let mut recovered: Vec<(u64, RecoveredEntry)> = tier
            .live
            .iter()
            .map(|(&seq, e)| {
                (
                    seq,
                    RecoveredEntry {
                        id: e.id,
                        namespace: e.namespace,
                        handle: e.handle(seq),
                    },
                )
            })
            .collect();
        recovered.sort_unstable_by_key(|(seq, _)| *seq);
        Ok((tier, recovered.into_iter().map(|(_, r)| r).collect()))
    }

    /// What the tier has detected and done since it was opened.
    pub fn counters(&self) -> DiskCounters {
        self.counters
    }

    /// The configuration the tier was opened with.
    pub fn config(&self) -> &DiskConfig {
        &self.config
    }

    /// Bytes of all segment files (live, garbage and tombstones); at most the capacity.
    pub fn disk_bytes(&self) -> ByteCount {
        ByteCount(self.disk_bytes)
    }

    /// Number of live blocks.
    pub fn live_blocks(&self) -> usize {
        self.live.len()
    }

    /// The file behind a region index, if that segment exists.
    pub fn segment_path(&self, region: RegionIndex) -> Option<PathBuf> {
        self.segments.get(&region.0).map(|s| s.path.clone())
    }

    /// Makes every append so far durable (data and directory), whatever the [`SyncPolicy`].
    pub fn sync(&mut self) -> Result<(), StoreError> {
        for seg in self.segments.values() {
            seg.sync()?;
        }
        sync_dir(&self.config.dir)
    }

    fn sync_appends(&self) -> bool {
        self.config.sync == SyncPolicy::EveryAppend
    }

    fn invalid(reason: String) -> StoreError {
        StoreError::InvalidHandle {
            tier: Tier::Disk,
            reason,
        }
    }

    /// The live entry a handle names; refuses foreign, stale and forged handles.
    fn lookup(&self, h: &Handle) -> Result<LiveEntry, StoreError> {
        if h.tier != Tier::Disk {
            return Err(Self::invalid(format!(
                "handle belongs to the {} tier",
                h.tier
            )));
        }
        let e = self.live.get(&h.generation).ok_or_else(|| {
            Self::invalid(format!("no live entry of generation {}", h.generation))
        })?;
        let expected = e.handle(h.generation);
        if expected != *h {
            return Err(Self::invalid(format!(
                "generation {} lives at segment {} offset {} len {}, handle says segment {} offset {} len {}",
                h.generation, expected.region.0, expected.offset, expected.len.0,
                h.region.0, h.offset, h.len.0
            )));
        }
        Ok(*e)
    }

    fn insert_live(&mut self, seq: u64, e: LiveEntry) {
        if let Some(seg) = self.segments.get_mut(&e.segment) {
            seg.live_count += 1;
            seg.live_bytes += e.entry_bytes();
        }
        self.live_bytes += e.entry_bytes();
        if let Some(old) = self.live.insert(seq, e) {
            self.unaccount(&old);
        }
    }

    fn forget_live(&mut self, seq: u64) -> Option<LiveEntry> {
        let e = self.live.remove(&seq)?;
        self.unaccount(&e);
        Some(e)
    }

    fn unaccount(&mut self, e: &LiveEntry) {
        if let Some(seg) = self.segments.get_mut(&e.segment) {
            seg.live_count -= 1;
            seg.live_bytes -= e.entry_bytes();
        }
        self.live_bytes -= e.entry_bytes();
    }

    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    fn active_segment(&mut self) -> Result<&mut Segment, StoreError> {
        let active = self.active;
        self.segments
            .get_mut(&active)
            .ok_or_else(|| StoreError::TierUnavailable {
                tier: Tier::Disk,
                reason: format!("active segment {active} is missing from the segment table"),
            })
    }

    /// Appends one entry to the active segment, synced per policy; returns `(segment, entry
    /// offset)`.
    fn append(&mut self, header: &EntryHeader, payload: &[u8]) -> Result<(u32, u64), StoreError> {
        let sync = self.sync_appends();
        self.append_with(header, payload, sync)
    }

    fn append_with(
        &mut self,
        header: &EntryHeader,
        payload: &[u8],
        sync: bool,
    ) -> Result<(u32, u64), StoreError> {
        let seg = self.active_segment()?;
        let offset = seg.append(&header.encode(), payload, sync)?;
        let number = seg.number;
        self.disk_bytes += header.entry_len();
        Ok((number, offset))
    }

    /// Appends a block entry. A large block under `verify_writes` is hashed on a scoped
    /// thread while the append runs, and cut off again (before any sync) if it does not
    /// match its id; small ones were checked by `write` before anything was touched.
    fn append_block(
        &mut self,
        header: &EntryHeader,
        bytes: &[u8],
    ) -> Result<(u32, u64), StoreError> {
        if !self.config.verify_writes || bytes.len() < TWO_THREADS_MIN_BYTES {
            return self.append(header, bytes);
        }
        let hash = || Blake3Ids.id(&header.namespace, &[bytes]);
        let (appended, hashed) = std::thread::scope(|s| {
            let hashing = std::thread::Builder::new()
                .name("kvfabric-disk-hash".into())
                .spawn_scoped(s, hash);
            let appended = self.append_with(header, bytes, false);
            // No thread to be had: hash here, after the append.
            let hashed = match hashing {
                Ok(t) => t.join().ok(),
                Err(_) => Some(hash()),
            };
            (appended, hashed)
        });
        let (number, offset) = appended?;
        let failure = match hashed {
            Some(found) if found == header.id => None,
            Some(found) => Some(StoreError::HashMismatch {
                id: header.id,
                found,
            }),
            None => Some(StoreError::io(
                "disk tier: verify write",
                std::io::Error::other("hash thread panicked"),
            )),
        };
        if let Some(e) = failure {
            self.active_segment()?.truncate(offset)?;
            self.disk_bytes -= header.entry_len();
            return Err(e);
        }
        if self.sync_appends() {
            self.active_segment()?.sync()?;
        }
        Ok((number, offset))
    }

    /// Appends a tombstone for block entry `target` (already or about to be forgotten).
    fn append_tombstone(&mut self, target: u64, e: &LiveEntry) -> Result<(), StoreError> {
        let seq = self.take_seq();
        let (number, _) =
            self.append(&EntryHeader::tombstone(seq, target, e.id, e.namespace), &[])?;
        if let Some(seg) = self.segments.get_mut(&number) {
            seg.tombstones.push(TombstoneRec {
                seq,
                target,
                id: e.id,
                namespace: e.namespace,
            });
        }
        Ok(())
    }

    /// Creates a fresh, empty segment and makes it the active one.
    fn new_active(&mut self) -> Result<(), StoreError> {
        let number = self.next_segment;
        self.next_segment = number
            .checked_add(1)
            .ok_or_else(|| StoreError::TierUnavailable {
                tier: Tier::Disk,
                reason: "segment numbers exhausted".into(),
            })?;
        let path = self.config.dir.join(segment_file_name(number));
        let seg = Segment::create(path, number, self.sync_appends())?;
        if self.sync_appends() {
            sync_dir(&self.config.dir)?;
        }
        self.disk_bytes += seg.len;
        self.segments.insert(number, seg);
        self.active = number;
        Ok(())
    }
}

impl TierBackend for DiskTier {
    fn tier(&self) -> Tier {
        Tier::Disk
    }

    fn capacity(&self) -> ByteCount {
        self.config.capacity
    }

    fn used(&self) -> ByteCount {
        ByteCount(self.live_bytes)
    }

    fn can_fit(&self, len: ByteCount) -> bool {
        self.plan(len.0).is_ok()
    }

    fn write(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
        bytes: &[u8],
    ) -> Result<Handle, StoreError> {
        let len = bytes.len() as u64;
        let plan = self.plan(len)?;
        if self.config.verify_writes && bytes.len() < TWO_THREADS_MIN_BYTES {
            let found = Blake3Ids.id(namespace, &[bytes]);
            if found != *id {
                return Err(StoreError::HashMismatch { id: *id, found });
            }
        }
        self.execute(plan)?;
        let seq = self.take_seq();
        let header = EntryHeader::block(seq, *id, *namespace, len);
        let (segment, offset) = self.append_block(&header, bytes)?;
        let entry = LiveEntry {
            segment,
            offset,
            len,
            id: *id,
            namespace: *namespace,
        };
        if let Some(seg) = self.segments.get_mut(&segment) {
            seg.blocks.push(seq);
        }
        self.copies.entry(seq).or_default().push(segment);
        self.insert_live(seq, entry);
        Ok(entry.handle(seq))
    }

    fn read(&mut self, handle: &Handle, id: &BlockId) -> Result<Vec<u8>, StoreError> {
        let e = self.lookup(handle)?;
        if e.id != *id {
            return Err(Self::invalid(format!(
                "handle holds block {}, asked for {id}",
                e.id
            )));
        }
        self.read_verified(handle.generation, &e)
    }

    fn free(&mut self, handle: &Handle) -> Result<(), StoreError> {
        let e = self.lookup(handle)?;
        self.append_tombstone(handle.generation, &e)?;
        self.forget_live(handle.generation);
        Ok(())
    }
}

#[cfg(test)]
mod conformance_tests {
    use super::*;

    #[test]
    fn disk_passes_conformance() {
        let mut dirs = Vec::new();
        crate::tier::conformance::run(&mut || {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut cfg = DiskConfig::new(dir.path(), ByteCount(1 << 20));
            cfg.segment_bytes = 256 << 10;
            let (tier, recovered) = DiskTier::open(cfg).expect("open a fresh tier");
            assert!(recovered.is_empty(), "a fresh directory recovers nothing");
            dirs.push(dir);
            tier
        });
    }
}
