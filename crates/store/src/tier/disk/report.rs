//! What the disk tier tells the store: counters, recovered blocks, and the outcome of
//! compaction and scrubbing.

use crate::error::StoreError;
use crate::handle::{Handle, RegionIndex};
use crate::id::{BlockId, NamespaceKey};
use crate::units::ByteCount;

/// What the disk tier has detected and done since it was opened (recovery included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCounters {
    /// Entries whose bytes did not match their id (at open, read, scrub or compaction);
    /// removed from the index, never served.
    pub quarantined: u64,
    /// Segments whose incomplete last entry was cut off at open.
    pub torn_tails_truncated: u64,
    /// Corrupt entry or segment headers skipped over at open (resynced to the next valid one).
    pub headers_skipped: u64,
    /// Compactions that rewrote or deleted at least one segment.
    pub compactions: u64,
    /// Bytes of segment files deleted (by compaction or to make room for a write), net of
    /// what compaction rewrote.
    pub bytes_reclaimed: u64,
}

/// A live block found on disk at open, for the store to rebuild its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredEntry {
    /// The block's id.
    pub id: BlockId,
    /// The namespace its id is keyed with.
    pub namespace: NamespaceKey,
    /// Where it lives (generation = the entry's sequence number).
    pub handle: Handle,
}

/// The outcome of [`DiskTier::compact`](super::DiskTier::compact).
#[derive(Debug, Default)]
pub struct CompactionReport {
    /// `(old, new)` handle of every moved block; the old handle is dead, the store must
    /// re-point its slot to the new one.
    pub relocations: Vec<(Handle, Handle)>,
    /// Blocks found corrupt while being copied: quarantined, their handles dead. The store
    /// must forget these slots.
    pub quarantined: Vec<(BlockId, Handle)>,
    /// Segments deleted.
    pub segments_removed: Vec<RegionIndex>,
    /// The segment the survivors were written to, if any were.
    pub new_segment: Option<RegionIndex>,
    /// Segment-file bytes before minus after.
    pub bytes_reclaimed: u64,
    /// Deletions that failed after the new segment was in place. Those segments hold no
    /// live block any more; they stay on disk and a later compaction or write retries.
    pub deferred: Vec<StoreError>,
}

/// The outcome of [`DiskTier::scrub`](super::DiskTier::scrub).
#[derive(Debug, Default)]
pub struct ScrubReport {
    /// Live entries whose header and bytes were checked and matched.
    pub entries_verified: u64,
    /// Payload bytes of those.
    pub bytes_verified: ByteCount,
    /// Entries that did not match: quarantined, their handles dead. The store must forget
    /// these slots.
    pub quarantined: Vec<(BlockId, Handle)>,
    /// Entries that could not be read (I/O errors); they stay live and are not verified.
    pub errors: Vec<StoreError>,
}
