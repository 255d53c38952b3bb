//! Reads whose byte work runs without the store: a host block served from a pinned view of
//! its bytes (no copy), a disk block read and verified from its segment file, a GPU block
//! copied off the device and verified.
//!
//! [`Store::begin_read`] does the bookkeeping a read needs (the slot's pin, nothing else) and
//! says how to get the bytes: a [`PinnedRead`] of a host block, which the caller reads (or
//! serves) for as long as it likes and hands back with [`Store::unpin_read`]; a [`DiskRead`]
//! to run ([`DiskRead::run`]: `pread` and blake3 on the caller's thread) and hand back with
//! [`Store::finish_disk_read`], which counts the hit; a [`GpuRead`] likewise
//! ([`GpuRead::run`]: the device copy and blake3 on the caller's thread,
//! [`Store::finish_gpu_read`]); or, for a host block when hits move to the GPU, a plain
//! [`Store::get_slot`] under the caller's borrow. A hit is counted and the policy touched when
//! the read begins (host) or finishes (disk, GPU).
//!
//! A pinned slot is never freed or moved, and a sealed slot's bytes are never written, so the
//! view is stable. A read's pin is counted apart from [`Store::pin`]'s (`reads`), and only its
//! `PinnedRead` can remove it: nothing else can unpin a slot someone is reading.

use std::sync::Arc;

use super::{tier_index, SlotId, Store};
use crate::error::StoreError;
use crate::handle::Tier;
use crate::id::{BlockId, NamespaceKey};
use crate::tier::device::DeviceRead;
use crate::tier::disk::SegmentRead;
use crate::tier::host_region::RegionBuf;
use crate::verified::VerifiedBlock;

/// A host block's bytes (header ‖ payload), readable while its slot stays pinned.
#[must_use = "a pinned read keeps its block pinned; hand it back with `unpin_read`"]
pub struct PinnedRead {
    slot: SlotId,
    id: BlockId,
    namespace: NamespaceKey,
    store: u64,
    region: Arc<RegionBuf>,
    offset: usize,
    len: usize,
}

impl PinnedRead {
    /// Header ‖ payload.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the slot is pinned by this value (only `unpin_read`, which consumes it,
        // unpins it), so its range is neither freed nor reused; a sealed slot is never written.
        unsafe { self.region.slice(self.offset, self.len) }
    }

    /// The slot read.
    pub fn slot(&self) -> SlotId {
        self.slot
    }

    /// A copy of the block as a [`VerifiedBlock`] of its own (for a caller that keeps or sends
    /// it apart from the arena): its bytes hashed to its id when it was sealed or installed,
    /// and a sealed slot's bytes are never written, so nothing is hashed again.
    pub fn to_verified(&self) -> VerifiedBlock {
        VerifiedBlock::checked(self.id, self.namespace, self.bytes().to_vec())
    }

    /// The block's id (its bytes hashed to it when sealed or installed).
    pub fn id(&self) -> BlockId {
        self.id
    }

    /// The namespace the id was computed under.
    pub fn namespace(&self) -> NamespaceKey {
        self.namespace
    }
}

impl std::fmt::Debug for PinnedRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedRead")
            .field("slot", &self.slot)
            .field("id", &self.id)
            .field("len", &self.len)
            .finish()
    }
}

/// A disk block to read and verify without the store.
#[must_use = "a disk read keeps its block pinned; hand it back with `finish_disk_read`"]
pub struct DiskRead {
    slot: SlotId,
    id: BlockId,
    namespace: NamespaceKey,
    store: u64,
    read: SegmentRead,
}

impl DiskRead {
    /// Reads the block and checks it against its id: the bytes, or
    /// [`StoreError::HashMismatch`] (which [`Store::finish_disk_read`] turns into a quarantine).
    pub fn run(&self) -> Result<Vec<u8>, StoreError> {
        let (bytes, found) = self.read.run(&self.namespace)?;
        if found != self.id {
            return Err(StoreError::HashMismatch { id: self.id, found });
        }
        Ok(bytes)
    }

    /// The slot read.
    pub fn slot(&self) -> SlotId {
        self.slot
    }
}

/// A GPU block to copy off the device and verify without the store.
#[must_use = "a GPU read keeps its block pinned; hand it back with `finish_gpu_read`"]
pub struct GpuRead {
    slot: SlotId,
    id: BlockId,
    namespace: NamespaceKey,
    store: u64,
    read: DeviceRead,
}

impl GpuRead {
    /// Copies the block off the device and checks it against its id: the bytes, or
    /// [`StoreError::HashMismatch`] (which [`Store::finish_gpu_read`] turns into a quarantine).
    pub fn run(&self) -> Result<Vec<u8>, StoreError> {
        self.read.run(&self.id)
    }

    /// The slot read.
    pub fn slot(&self) -> SlotId {
        self.slot
    }
}

/// How to read one slot (see the module docs).
#[must_use = "a read step may hold a pin; finish it"]
pub enum ReadStep {
    /// A host block: serve the view, then [`Store::unpin_read`].
    Host(PinnedRead),
    /// A disk block: [`DiskRead::run`], then [`Store::finish_disk_read`].
    Disk(DiskRead),
    /// A GPU block: [`GpuRead::run`], then [`Store::finish_gpu_read`].
    Gpu(GpuRead),
    /// A host block a hit moves to the GPU (or a device tier whose reads run in place): read
    /// it with [`Store::get_slot`] (it may copy to the device: off the async workers).
    InPlace(SlotId),
}

impl Store {
    /// Starts reading `slot` (see the module docs). A host hit is counted here.
    pub fn begin_read(&mut self, slot: SlotId) -> Result<ReadStep, StoreError> {
        let (id, namespace, handle) = {
            let s = self.slot(slot)?;
            (s.id, s.namespace, s.handle)
        };
        match handle.tier {
            // A hit that moves the block to the device ([`super::GpuPolicy::promote`]) is
            // read in place: the bytes, then the move, under the caller's borrow.
            Tier::Host if self.reads_reach_device() => Ok(ReadStep::InPlace(slot)),
            Tier::Host => {
                let pinned = self.pin_host_read(slot)?;
                self.count_hit(slot, Tier::Host);
                Ok(ReadStep::Host(pinned))
            }
            Tier::Disk => {
                let disk = self.disk.as_ref().expect("a disk slot has a disk tier");
                let read = disk.segment_read(&handle, &id)?;
                self.pin_read(slot)?;
                Ok(ReadStep::Disk(DiskRead {
                    slot,
                    id,
                    namespace,
                    store: self.instance,
                    read,
                }))
            }
            Tier::Gpu => {
                let gpu = self.gpu.as_deref().expect("a GPU slot has a GPU tier");
                let Some(read) = gpu.device_read(&handle)? else {
                    return Ok(ReadStep::InPlace(slot));
                };
                self.pin_read(slot)?;
                Ok(ReadStep::Gpu(GpuRead {
                    slot,
                    id,
                    namespace,
                    store: self.instance,
                    read,
                }))
            }
        }
    }

    /// Ends a disk read: unpins, counts the hit and returns the verified block (not promoted:
    /// see [`super::room`]); a mismatch is quarantined here ([`StoreError::Corrupt`]).
    pub fn finish_disk_read(
        &mut self,
        d: DiskRead,
        outcome: Result<Vec<u8>, StoreError>,
    ) -> Result<VerifiedBlock, StoreError> {
        self.check_mine(d.store)?;
        self.finish_detached(d.slot, d.id, d.namespace, Tier::Disk, outcome)
    }

    /// Ends a GPU read as [`Store::finish_disk_read`] ends a disk read (the block is already
    /// on the top tier).
    pub fn finish_gpu_read(
        &mut self,
        d: GpuRead,
        outcome: Result<Vec<u8>, StoreError>,
    ) -> Result<VerifiedBlock, StoreError> {
        self.check_mine(d.store)?;
        self.finish_detached(d.slot, d.id, d.namespace, Tier::Gpu, outcome)
    }

    /// Gives up a GPU read without counting it.
    pub fn drop_gpu_read(&mut self, d: GpuRead) -> Result<(), StoreError> {
        self.check_mine(d.store)?;
        self.unpin_slot_read(d.slot)
    }

    /// Unpins a read run outside the store and counts its hit; a mismatch is read again here,
    /// where the tier quarantines what does not verify (and serves what does, should the
    /// mismatch have been a torn read of a moved entry).
    fn finish_detached(
        &mut self,
        slot: SlotId,
        id: BlockId,
        namespace: NamespaceKey,
        tier: Tier,
        outcome: Result<Vec<u8>, StoreError>,
    ) -> Result<VerifiedBlock, StoreError> {
        self.unpin_slot_read(slot)?;
        match outcome {
            Ok(bytes) => {
                self.count_hit(slot, tier);
                Ok(VerifiedBlock::checked(id, namespace, bytes))
            }
            Err(StoreError::HashMismatch { .. }) => self.read(slot),
            Err(e) => Err(e),
        }
    }

    /// Ends a scrub's disk read: unpins without counting a hit (a scrub is not a use of the
    /// block). A mismatch is read again and quarantined as [`Store::finish_disk_read`] does
    /// ([`StoreError::Corrupt`]); `Ok` means the bytes on disk hash to the block's id.
    pub fn finish_scrub_read(
        &mut self,
        d: DiskRead,
        outcome: Result<Vec<u8>, StoreError>,
    ) -> Result<(), StoreError> {
        let slot = d.slot;
        self.drop_disk_read(d)?;
        match outcome {
            Ok(_) => Ok(()),
            Err(StoreError::HashMismatch { .. }) => self.read(slot).map(|_| ()),
            Err(e) => Err(e),
        }
    }

    /// Gives up a disk read without counting it (a comparison's).
    pub(super) fn drop_disk_read(&mut self, d: DiskRead) -> Result<(), StoreError> {
        self.check_mine(d.store)?;
        self.unpin_slot_read(d.slot)
    }

    /// Hands a pinned read back.
    pub fn unpin_read(&mut self, p: PinnedRead) -> Result<(), StoreError> {
        self.check_mine(p.store)?;
        self.unpin_slot_read(p.slot)
    }

    /// Pins a host slot for a read outside the store.
    pub(super) fn pin_host_read(&mut self, slot: SlotId) -> Result<PinnedRead, StoreError> {
        let s = self.slot(slot)?;
        let (id, namespace, handle) = (s.id, s.namespace, s.handle);
        let region = self.host.region(&handle)?;
        self.pin_read(slot)?;
        Ok(PinnedRead {
            slot,
            id,
            namespace,
            store: self.instance,
            region,
            offset: handle.offset as usize,
            len: handle.len.as_usize(),
        })
    }

    fn pin_read(&mut self, slot: SlotId) -> Result<(), StoreError> {
        let s = self.slot_mut(slot)?;
        s.pins += 1;
        s.reads += 1;
        Ok(())
    }

    fn unpin_slot_read(&mut self, slot: SlotId) -> Result<(), StoreError> {
        let s = self.slot_mut(slot)?;
        if s.reads == 0 || s.pins == 0 {
            return Err(StoreError::Underflow {
                id: s.id,
                what: "read pin",
            });
        }
        s.reads -= 1;
        s.pins -= 1;
        Ok(())
    }

    fn count_hit(&mut self, slot: SlotId, tier: Tier) {
        self.counters.hits[tier_index(tier)] += 1;
        if let Some(p) = &mut self.policies[tier_index(tier)] {
            p.touch(slot);
        }
    }
}
