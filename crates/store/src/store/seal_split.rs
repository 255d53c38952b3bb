//! Sealing a [`Prepared`] block in steps whose byte work needs no store: the store decides
//! dedup, and when equal-id blocks already exist the full byte comparison runs on pinned
//! views of the host ones and verified reads of the disk ones ([`Comparison::run`]) while the
//! owner's lock is free.
//!
//! Blocks under the same id in the GPU tier are compared inside [`Store::seal_prepared`]
//! (device memory is not shared outside the tier). A block that appeared under the id between
//! the steps, or a disk read that did not verify, is compared inside [`Store::seal_compared`]
//! (where a corrupt copy is quarantined); either way no block is shared without a full byte
//! comparison.

use super::pinned::{DiskRead, PinnedRead, ReadStep};
use super::reserve::Prepared;
use super::seal::Candidate;
use super::{Sealed, SlotId, Store};
use crate::error::StoreError;
use crate::handle::Tier;
use crate::tier::TierBackend;

impl Against {
    fn slot(&self) -> SlotId {
        match self {
            Against::Host(p) => p.slot(),
            Against::Disk(d) => d.slot(),
        }
    }
}

/// What [`Store::seal_prepared`] decided.
#[must_use = "a comparison holds pins and arena space; finish it with `seal_compared`"]
pub enum SealStep {
    /// Sealed: new content, or shared with a block compared equal.
    Sealed(Sealed),
    /// Blocks with the same id sit in the host arena: compare ([`Comparison::run`]), then
    /// [`Store::seal_compared`].
    Compare(Comparison),
}

/// A prepared block and the blocks that share its id, pinned.
pub struct Comparison {
    prepared: Prepared,
    against: Vec<Against>,
    /// Per entry of `against`, once run: whether the bytes are equal (`None`: not known).
    equal: Vec<Option<bool>>,
}

/// One block to compare with.
enum Against {
    Host(PinnedRead),
    Disk(DiskRead),
}

impl Comparison {
    /// Compares the candidate with every pinned block, byte for byte (no store needed; disk
    /// blocks are read and verified first).
    pub fn run(&mut self) {
        let candidate = self.prepared.reservation.block();
        self.equal = self
            .against
            .iter()
            .map(|a| match a {
                Against::Host(p) => Some(p.bytes() == candidate),
                // A read that fails or does not verify is left to `seal_compared`.
                Against::Disk(d) => d.run().ok().map(|b| b == candidate),
            })
            .collect();
    }

    /// Whether [`Comparison::run`] reads the disk (worth running off an async worker).
    pub fn reads_disk(&self) -> bool {
        self.against.iter().any(|a| matches!(a, Against::Disk(_)))
    }
}

impl Store {
    /// Dedups a prepared block: no block under its id → sealed as new, without touching its
    /// bytes; equal-id blocks in the host arena → a [`Comparison`] to run outside the lock.
    pub fn seal_prepared(&mut self, p: Prepared) -> Result<SealStep, StoreError> {
        self.check_mine(p.reservation.store)?;
        let slots = self.slots_of(&p.id, &p.namespace);
        let on_gpu = slots
            .iter()
            .any(|s| self.slot(*s).is_ok_and(|s| s.handle.tier == Tier::Gpu));
        if slots.is_empty() || on_gpu {
            return self.finish_prepared(p, &[]).map(SealStep::Sealed);
        }
        let mut against = Vec::with_capacity(slots.len());
        for slot in slots {
            let step = match self.begin_compare(slot) {
                Ok(step) => step,
                Err(e) => {
                    self.end_compare(against);
                    self.cancel(p.reservation)?;
                    return Err(e);
                }
            };
            against.push(step);
        }
        let n = against.len();
        Ok(SealStep::Compare(Comparison {
            prepared: p,
            against,
            equal: vec![None; n],
        }))
    }

    /// Finishes a comparison: unpins, then shares a block found equal or seals the candidate
    /// as new content (a collision if an id-equal block differed).
    pub fn seal_compared(&mut self, c: Comparison) -> Result<Sealed, StoreError> {
        let known: Vec<(SlotId, bool)> = c
            .against
            .iter()
            .zip(&c.equal)
            .filter_map(|(a, eq)| eq.map(|eq| (a.slot(), eq)))
            .collect();
        self.end_compare(c.against);
        self.finish_prepared(c.prepared, &known)
    }

    /// Pins one equal-id block for a comparison outside the lock.
    fn begin_compare(&mut self, slot: SlotId) -> Result<Against, StoreError> {
        match self.slot(slot)?.handle.tier {
            Tier::Host => self.pin_host_read(slot).map(Against::Host),
            _ => match self.begin_read(slot)? {
                ReadStep::Disk(d) => Ok(Against::Disk(d)),
                ReadStep::Host(p) => Ok(Against::Host(p)),
                // Never asked: `seal_prepared` compares GPU blocks in place.
                ReadStep::Gpu(_) | ReadStep::InPlace(_) => {
                    unreachable!("GPU blocks are compared in place")
                }
            },
        }
    }

    /// Unpins what a comparison pinned (best effort: a slot gone since has no pin to drop).
    fn end_compare(&mut self, against: Vec<Against>) {
        for a in against {
            let _ = match a {
                Against::Host(p) => self.unpin_read(p),
                Against::Disk(d) => self.drop_disk_read(d),
            };
        }
    }

    /// Dedup of a prepared block by [`Store::finish_admit`], with the comparisons already made.
    fn finish_prepared(
        &mut self,
        p: Prepared,
        known: &[(SlotId, bool)],
    ) -> Result<Sealed, StoreError> {
        let h = p.reservation.handle;
        // The reservation becomes the candidate: from here the store owns its room.
        self.reservations -= 1;
        self.finish_admit(
            p.id,
            &p.namespace,
            Candidate::Host(h),
            Some(h),
            Tier::Host,
            known,
        )
        .inspect_err(|_| {
            // Not installed: give the room back (a second free is refused by the generation).
            let _ = self.host.free(&h);
        })
    }
}
