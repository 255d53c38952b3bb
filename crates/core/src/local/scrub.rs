//! Scrubbing: the held blocks on the disk tier are read back and verified in the background,
//! at a bounded rate, so that a copy whose bytes rotted on disk is found while the block's
//! other copies still exist.
//!
//! A copy that does not hash to its id is quarantined and forgotten like one a read finds
//! ([`HoldingChange::Lost`](super::HoldingChange::Lost)): on a cluster member its owner
//! records are released, the block's other holders see it under-replicated and copy it again
//! (`cluster/repair.rs`). Without a scrub such a copy is found only when something reads it —
//! perhaps a repair after the block's last good copy was lost.
//!
//! Each pass takes the list of held disk blocks at its start and verifies each that is still
//! held there (a block deleted, promoted or quarantined meanwhile is skipped). A scrub read
//! pins its slot like any read, is not counted as a hit (it is not a use), and does its `pread`
//! and hash outside the store lock. Reads are paced to `bytes_per_s`; passes are `pause` apart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_store::{BlockId, NamespaceKey, ReadStep, SlotId, StoreError, Tier};

use super::{block_in_place, LocalError, LocalNode};

/// Bytes per second a scrub reads unless configured (a 1 TiB tier: a pass every ~18 h).
pub const SCRUB_BYTES_PER_S_DEFAULT: u64 = 16 << 20;
/// Pause between two passes unless configured.
pub const SCRUB_PAUSE_MS_DEFAULT: u64 = 10_000;
/// Sleeps shorter than this are carried into the next block's (timer granularity).
const PACE_SLEEP_MIN: Duration = Duration::from_millis(5);

/// How fast, and how often, to scrub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScrubConfig {
    /// Read rate bound (bytes per second, at least 1).
    pub bytes_per_s: u64,
    /// Pause before the first pass and between passes.
    pub pause: Duration,
}

impl Default for ScrubConfig {
    fn default() -> ScrubConfig {
        ScrubConfig {
            bytes_per_s: SCRUB_BYTES_PER_S_DEFAULT,
            pause: Duration::from_millis(SCRUB_PAUSE_MS_DEFAULT),
        }
    }
}

/// What scrubbing has done since the node started.
#[derive(Debug, Default)]
pub struct ScrubCounters {
    /// Passes completed.
    pub passes: AtomicU64,
    /// Copies read back that hashed to their ids.
    pub verified: AtomicU64,
    /// Bytes of those copies.
    pub bytes: AtomicU64,
    /// Copies that did not, quarantined and forgotten.
    pub lost: AtomicU64,
    /// Reads that failed for another reason (an I/O error): the copy stays held.
    pub errors: AtomicU64,
}

impl ScrubCounters {
    /// passes, verified, bytes, lost, errors.
    pub fn values(&self) -> [u64; 5] {
        [
            &self.passes,
            &self.verified,
            &self.bytes,
            &self.lost,
            &self.errors,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }
}

/// What one scrub read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scrubbed {
    /// The copy hashes to its id; this many bytes were read.
    Verified(u64),
    /// It did not: quarantined and forgotten.
    Lost,
    /// Not held on disk in that slot any more (deleted, promoted, quarantined meanwhile).
    Skipped,
}

impl LocalNode {
    /// The held blocks whose first copy sits on the disk tier now.
    pub fn disk_held(&self) -> Result<Vec<(NamespaceKey, BlockId, SlotId)>, LocalError> {
        self.with(|l| {
            Ok(l.held
                .iter()
                .filter(|(_, _, slot)| l.store.handle(*slot).is_ok_and(|h| h.tier == Tier::Disk))
                .collect())
        })
    }

    /// Reads `slot` of held block `id` back from disk and verifies it (see the module docs).
    pub fn scrub_one(
        &self,
        ns: &NamespaceKey,
        id: &BlockId,
        slot: SlotId,
    ) -> Result<Scrubbed, LocalError> {
        let begun = self.with(|l| {
            let held_here = l.held.slots(ns, id).is_some_and(|s| s.contains(&slot));
            let on_disk = l.store.handle(slot).is_ok_and(|h| h.tier == Tier::Disk);
            if !(held_here && on_disk) {
                return Ok(None);
            }
            match l.store.begin_read(slot)? {
                ReadStep::Disk(d) => Ok(Some(d)),
                ReadStep::Host(p) => l.store.unpin_read(p).map(|()| None).map_err(Into::into),
                ReadStep::Gpu(g) => l.store.drop_gpu_read(g).map(|()| None).map_err(Into::into),
                ReadStep::InPlace(_) => Ok(None),
            }
        })?;
        let Some(d) = begun else {
            return Ok(Scrubbed::Skipped);
        };
        let outcome = block_in_place(|| d.run());
        let len = outcome.as_ref().map_or(0, |b| b.len() as u64);
        let done = self.with_io(|l| match l.store.finish_scrub_read(d, outcome) {
            Ok(()) => Ok(Scrubbed::Verified(len)),
            Err(StoreError::Corrupt { .. }) | Err(StoreError::StaleSlot(_)) => {
                l.forget_slot(ns, id, slot);
                Ok(Scrubbed::Lost)
            }
            Err(e) => Err(e.into()),
        });
        self.room.notify_waiters();
        done
    }

    /// What scrubbing has done since the node started.
    pub fn scrub_counters(&self) -> &ScrubCounters {
        &self.scrub
    }

    /// One pass over the blocks held on disk now, paced to `bytes_per_s`.
    pub async fn scrub_pass(&self, bytes_per_s: u64) {
        let counters = &self.scrub;
        let blocks = match self.disk_held() {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "scrub: listing the disk tier's blocks");
                return;
            }
        };
        let start = Instant::now();
        let mut read = 0u64;
        for (ns, id, slot) in blocks {
            match self.scrub_one(&ns, &id, slot) {
                Ok(Scrubbed::Verified(n)) => {
                    counters.verified.fetch_add(1, Ordering::Relaxed);
                    counters.bytes.fetch_add(n, Ordering::Relaxed);
                    read += n;
                }
                Ok(Scrubbed::Lost) => {
                    counters.lost.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Scrubbed::Skipped) => continue,
                Err(e) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(block = %id, error = %e, "scrub: a read failed; the copy stays held");
                }
            }
            let due = Duration::from_secs_f64(read as f64 / bytes_per_s.max(1) as f64);
            let ahead = due.saturating_sub(start.elapsed());
            if ahead >= PACE_SLEEP_MIN {
                tokio::time::sleep(ahead).await;
            }
        }
        counters.passes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Scrubs for the life of the node (aborted at shutdown): a pass, then `config.pause`.
pub async fn run(node: Arc<LocalNode>, config: ScrubConfig) {
    loop {
        tokio::time::sleep(config.pause).await;
        node.scrub_pass(config.bytes_per_s).await;
    }
}
