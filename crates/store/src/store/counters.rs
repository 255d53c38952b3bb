//! Store counters: plain values owned by one store (no global statics); the node exports them.

use crate::tier::disk::DiskCounters;

/// What a store has done since it was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Seals that stored new content.
    pub seals_new: u64,
    /// Seals that matched stored bytes exactly and shared them.
    pub seals_shared: u64,
    /// Seals whose id matched a stored block with different bytes (a security signal).
    pub dedup_collisions: u64,
    /// Reads served, per tier (gpu, host, disk).
    pub hits: [u64; 3],
    /// Reads of ids not held.
    pub misses: u64,
    /// Blocks moved to a slower tier.
    pub demotions: u64,
    /// Blocks moved to a faster tier on a hit.
    pub promotions: u64,
    /// Unreferenced blocks dropped from the last tier to make room.
    pub evictions: u64,
    /// Tier reads whose bytes did not match the id (never served).
    pub verify_failures: u64,
    /// Blocks recovered from disk at open.
    pub recovered: u64,
    /// Disk-tier counters (quarantine, torn tails, compaction).
    pub disk: DiskCounters,
}
