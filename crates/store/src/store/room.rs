//! Making room, and moving blocks between tiers, with the byte work outside the owner's lock.
//!
//! [`Store::room_step`] takes one step towards `len` free bytes in a tier and says what is
//! left to do: nothing ([`RoomStep::Fits`]); ask again (an unreferenced block was dropped, or a
//! GPU block moved down here); write a referenced host block to disk ([`RoomStep::Demote`]:
//! [`Demotion::run`] outside the lock, then [`Store::finish_demotion`]); or give up for now
//! ([`RoomStep::Full`], saying whether room held by puts, reads or moves in flight may come
//! back). The owner loops, and may wait for room a bounded time when it is transient.
//!
//! A host block promoted after a disk hit is copied into a host allocation outside the lock
//! ([`Store::begin_promote`], [`Promotion::fill`], [`Store::finish_promote`]).
//!
//! What stays under the owner's borrow: metadata, the 104-byte tombstone a disk free appends
//! (synced with `sync = every_append`), creating and deleting segment files, disk compaction
//! (only when the disk tier is full of garbage), and every GPU copy (device memory is not
//! shared outside the tier).

use std::sync::Arc;

use super::pinned::PinnedRead;
use super::{tier_index, SlotId, Store, TierMove};
use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::tier::disk::DiskAppend;
use crate::tier::host_region::RegionBuf;
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// What [`Store::room_step`] found.
#[must_use = "a demotion holds a pin and disk space; finish it"]
pub enum RoomStep {
    /// The bytes fit now.
    Fits,
    /// Some room was made; ask again.
    Progress,
    /// A host block must be written to disk: [`Demotion::run`], then
    /// [`Store::finish_demotion`], then ask again.
    Demote(Box<Demotion>),
    /// No room can be made now.
    Full {
        /// Room is held by reservations, pinned reads or demotions in flight: it may come
        /// back when they end.
        transient: bool,
    },
}

/// A host block on its way to disk.
pub struct Demotion {
    src: PinnedRead,
    dst: DiskAppend,
}

impl Demotion {
    /// Writes the block to its reserved place on disk (no store needed).
    pub fn run(&self) -> Result<(), StoreError> {
        self.dst.write(self.src.bytes())
    }

    /// The slot being moved.
    pub fn slot(&self) -> SlotId {
        self.src.slot()
    }
}

/// A disk block on its way up to the host tier.
pub struct Promotion {
    slot: SlotId,
    from: Handle,
    to: Handle,
    region: Arc<RegionBuf>,
    store: u64,
    filled: bool,
}

impl Promotion {
    /// Copies the block's bytes (as just read and verified from disk) into the host
    /// allocation (no store needed).
    pub fn fill(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        if bytes.len() != self.to.len.as_usize() {
            return Err(StoreError::PayloadLength {
                expected: self.to.len.0,
                found: bytes.len() as u64,
            });
        }
        // SAFETY: `to` is a fresh allocation that no slot, reservation or view uses; only
        // this promotion touches it until `finish_promote` takes it back by value.
        unsafe {
            self.region
                .slice_mut(self.to.offset as usize, self.to.len.as_usize())
                .copy_from_slice(bytes);
        }
        self.filled = true;
        Ok(())
    }
}

impl Store {
    /// One step towards `len` free bytes in `tier` (see the module docs).
    pub fn room_step(&mut self, tier: Tier, len: ByteCount) -> Result<RoomStep, StoreError> {
        let Some(backend) = self.tier_ref(tier) else {
            return Ok(RoomStep::Full { transient: false });
        };
        if backend.can_fit(len) {
            return Ok(RoomStep::Fits);
        }
        if len > backend.capacity() {
            return Ok(RoomStep::Full { transient: false });
        }
        let next = self.next_tier(tier);
        if tier != Tier::Host || next != Some(Tier::Disk) {
            // GPU → host moves, last-tier drops and disk compaction: in place.
            return Ok(if self.make_room_once(tier)? {
                RoomStep::Progress
            } else {
                RoomStep::Full {
                    transient: self.room_in_flight(tier),
                }
            });
        }
        let slots = &self.slots;
        let victim = self.policies[tier_index(tier)]
            .as_mut()
            .and_then(|p| p.victim(&mut |s| slots.get(&s).is_some_and(|x| x.pins == 0)));
        let Some(victim) = victim else {
            return Ok(RoomStep::Full {
                transient: self.room_in_flight(tier),
            });
        };
        let (id, namespace, vlen, refs) = {
            let s = self.slot(victim)?;
            (s.id, s.namespace, s.handle.len, s.refs)
        };
        // Room on disk first (drops unreferenced disk blocks: metadata and tombstones).
        let dst = match self.make_room(Tier::Disk, vlen) {
            Ok(true) => {
                let disk = self.disk.as_mut().expect("a next tier of disk exists");
                match disk.begin_append(&id, &namespace, vlen.0) {
                    Ok(d) => Some(d),
                    Err(StoreError::Full { .. }) => None,
                    Err(e) => {
                        self.track(tier, victim);
                        return Err(e);
                    }
                }
            }
            Ok(false) => None,
            Err(e) => {
                self.track(tier, victim);
                return Err(e);
            }
        };
        let Some(dst) = dst else {
            // Nowhere to go: an unreferenced block is dropped, a referenced one stays.
            if refs == 0 {
                self.drop_slot(victim)?;
                self.counters.evictions += 1;
                return Ok(RoomStep::Progress);
            }
            self.track(tier, victim);
            return Ok(RoomStep::Full {
                transient: self.room_in_flight(tier),
            });
        };
        let src = self.pin_host_read(victim)?;
        self.demotions += 1;
        Ok(RoomStep::Demote(Box::new(Demotion { src, dst })))
    }

    /// Ends a demotion: on success the block now lives on disk and its host room is free;
    /// on failure (the write's error is returned) or when the block was pinned meanwhile, it
    /// stays where it was and the disk space is given up.
    pub fn finish_demotion(
        &mut self,
        d: Demotion,
        outcome: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.demotions -= 1;
        let slot = d.src.slot();
        self.unpin_read(d.src)?;
        let disk = self.disk.as_mut().expect("a demotion has a disk tier");
        let current = self.slots.get(&slot).map(|s| (s.handle, s.pins));
        let (old, pins) = match (outcome, current) {
            (Ok(()), Some((h, 0))) if h.tier == Tier::Host => (h, 0),
            (outcome, current) => {
                disk.abort_append(d.dst);
                if current.is_some() {
                    self.track(Tier::Host, slot);
                }
                return outcome;
            }
        };
        debug_assert_eq!(pins, 0);
        let handle = disk.commit_append(d.dst);
        self.host.free(&old)?;
        self.relocate(slot, old, handle);
        self.counters.demotions += 1;
        Ok(())
    }

    /// Starts promoting a disk block to the host tier after a hit, if the host tier has room
    /// now (make room first with [`Store::room_step`]); `None` when it is not worth it or not
    /// possible (pinned, not on disk, no room).
    pub fn begin_promote(&mut self, slot: SlotId) -> Result<Option<Promotion>, StoreError> {
        let s = self.slot(slot)?;
        let from = s.handle;
        if s.pins > 0 || from.tier != Tier::Disk || !self.host.can_fit(from.len) {
            return Ok(None);
        }
        let to = self.host.allocate(from.len)?;
        let region = self.host.region(&to)?;
        Ok(Some(Promotion {
            slot,
            from,
            to,
            region,
            store: self.instance,
            filled: false,
        }))
    }

    /// Ends a promotion: the block moves up when it was filled and is still where it was and
    /// unpinned; otherwise the host allocation is given back.
    pub fn finish_promote(&mut self, p: Promotion) -> Result<(), StoreError> {
        self.check_mine(p.store)?;
        let still = self
            .slots
            .get(&p.slot)
            .is_some_and(|s| s.handle == p.from && s.pins == 0);
        if !(p.filled && still) {
            return self.host.free(&p.to);
        }
        self.tier_mut(Tier::Disk).expect("present").free(&p.from)?;
        self.relocate(p.slot, p.from, p.to);
        self.counters.promotions += 1;
        Ok(())
    }

    /// Points a slot at its new place and moves it between the tiers' policies.
    fn relocate(&mut self, slot: SlotId, from: Handle, to: Handle) {
        if let Some(p) = &mut self.policies[tier_index(from.tier)] {
            p.remove(slot);
        }
        if let Some(p) = &mut self.policies[tier_index(to.tier)] {
            p.insert(slot, to.len.0);
        }
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        s.handle = to;
        let (id, namespace) = (s.id, s.namespace);
        self.note_move(TierMove {
            slot,
            id,
            namespace,
            from: from.tier,
            to: to.tier,
        });
    }

    /// Puts a slot back under its tier's policy (a victim that did not move).
    fn track(&mut self, tier: Tier, slot: SlotId) {
        let Some(len) = self.slots.get(&slot).map(|s| s.handle.len.0) else {
            return;
        };
        if let Some(p) = &mut self.policies[tier_index(tier)] {
            p.insert(slot, len);
        }
    }

    /// Whether room in `tier` is held by something that ends on its own: reservations (host),
    /// pinned blocks, demotions in flight.
    fn room_in_flight(&self, tier: Tier) -> bool {
        (tier == Tier::Host && (self.reservations > 0 || self.demotions > 0))
            || self
                .slots
                .values()
                .any(|s| s.handle.tier == tier && s.pins > 0)
    }
}
