//! Placement across tiers: make room by policy, demote down the chain, promote on hits,
//! compact the disk tier when it is full of garbage.

use super::{tier_index, SlotId, Store, TierMove, TIERS};
use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::id::{BlockId, NamespaceKey};
use crate::units::ByteCount;

impl Store {
    pub(super) fn next_tier(&self, tier: Tier) -> Option<Tier> {
        TIERS
            .into_iter()
            .skip(tier_index(tier) + 1)
            .find(|&t| self.tier_ref(t).is_some())
    }

    /// Writes `bytes` into the fastest tier at or below `start` that has or can make room.
    pub(crate) fn place(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
        bytes: &[u8],
        start: Tier,
    ) -> Result<Handle, StoreError> {
        let len = ByteCount(bytes.len() as u64);
        let mut tier = Some(start)
            .filter(|&t| self.tier_ref(t).is_some())
            .or(self.next_tier(start));
        while let Some(t) = tier {
            if self.make_room(t, len)? {
                return self
                    .tier_mut(t)
                    .expect("present")
                    .write(id, namespace, bytes);
            }
            tier = self.next_tier(t);
        }
        Err(StoreError::Full { needed: len })
    }

    /// Frees space in `tier` until `len` fits, by policy. `Ok(false)` when nothing more can go.
    pub(crate) fn make_room(&mut self, tier: Tier, len: ByteCount) -> Result<bool, StoreError> {
        let mut compacted = false;
        loop {
            let backend = self.tier_ref(tier).expect("present");
            if backend.can_fit(len) {
                return Ok(true);
            }
            if len > backend.capacity() {
                return Ok(false);
            }
            if self.evict_one(tier)? {
                continue;
            }
            if tier == Tier::Disk && !compacted {
                compacted = true;
                if self.compact_disk()? > 0 {
                    continue;
                }
            }
            return Ok(false);
        }
    }

    /// One step of [`Store::make_room`]: evicts one victim or, on disk, compacts.
    /// `Ok(false)` when neither made room.
    pub(super) fn make_room_once(&mut self, tier: Tier) -> Result<bool, StoreError> {
        if self.evict_one(tier)? {
            return Ok(true);
        }
        Ok(tier == Tier::Disk && self.compact_disk()? > 0)
    }

    /// Moves (or, from the last tier, drops) one victim. `Ok(false)` if there is none.
    fn evict_one(&mut self, tier: Tier) -> Result<bool, StoreError> {
        let last = self.next_tier(tier).is_none();
        let slots = &self.slots;
        let victim = self.policies[tier_index(tier)].as_mut().and_then(|p| {
            p.victim(&mut |s| {
                slots
                    .get(&s)
                    .is_some_and(|x| x.pins == 0 && (!last || x.refs == 0))
            })
        });
        let Some(victim) = victim else {
            return Ok(false);
        };
        if last {
            self.drop_slot(victim)?;
            self.counters.evictions += 1;
            return Ok(true);
        }
        match self.demote(victim, tier) {
            Ok(()) => Ok(true),
            Err(StoreError::Full { .. }) => {
                if self.slot(victim)?.refs == 0 {
                    self.drop_slot(victim)?;
                    self.counters.evictions += 1;
                    Ok(true)
                } else {
                    // Referenced and nowhere to go: it stays, and so does the shortage.
                    let len = self.slot(victim)?.handle.len.0;
                    if let Some(p) = &mut self.policies[tier_index(tier)] {
                        p.insert(victim, len);
                    }
                    Ok(false)
                }
            }
            Err(StoreError::Corrupt { .. }) => Ok(true), // quarantined by read_slot: room made
            Err(e) => Err(e),
        }
    }

    /// Frees a slot's bytes and forgets it.
    pub(crate) fn drop_slot(&mut self, slot: SlotId) -> Result<(), StoreError> {
        let handle = self.slot(slot)?.handle;
        self.tier_mut(handle.tier).expect("present").free(&handle)?;
        self.remove_slot(slot);
        Ok(())
    }

    /// Moves a slot from `from` to the next tier with room.
    fn demote(&mut self, slot: SlotId, from: Tier) -> Result<(), StoreError> {
        let next = self.next_tier(from).ok_or(StoreError::Full {
            needed: ByteCount(0),
        })?;
        let bytes = self.read_slot(slot)?;
        self.move_slot(slot, &bytes, next)?;
        self.counters.demotions += 1;
        Ok(())
    }

    /// Moves a slot one tier up after a hit, if room can be made there without dropping
    /// referenced blocks: disk to host, and host to GPU when the GPU policy promotes hits
    /// ([`super::GpuPolicy::promote`]). Pinned slots stay where they are.
    pub(crate) fn promote(&mut self, slot: SlotId, bytes: &[u8]) -> Result<(), StoreError> {
        let from = self.slot(slot)?.handle.tier;
        let Some(up) =
            TIERS[..tier_index(from)].iter().rev().copied().find(|&t| {
                (t != Tier::Gpu || self.gpu_policy.promote) && self.tier_ref(t).is_some()
            })
        else {
            return Ok(());
        };
        if let Some(m) = self.raise(slot, bytes, up)? {
            self.note_move(m);
            self.counters.promotions += 1;
        }
        Ok(())
    }

    /// Places a put just sealed in host memory by the GPU policy ([`super::GpuPolicy::puts`]): moved
    /// to the GPU tier when room can be made there without dropping referenced blocks. Not
    /// recorded as a tier move (the put is announced where it ends up). Returns its tier.
    pub fn place_put(&mut self, slot: SlotId) -> Result<Tier, StoreError> {
        let s = self.slot(slot)?;
        let tier = s.handle.tier;
        if !(self.gpu_policy.puts && tier == Tier::Host && self.gpu.is_some()) {
            return Ok(tier);
        }
        // Copied to the device from its place in the arena, not through a buffer of its own.
        let handle = s.handle;
        let region = self.host.region(&handle)?;
        // SAFETY: a sealed slot's bytes are never written, and `raise` pins the slot while it
        // makes room, then frees its host range only after the bytes are on the device.
        let bytes = unsafe { region.slice(handle.offset as usize, handle.len.as_usize()) };
        self.raise(slot, bytes, Tier::Gpu)?;
        Ok(self.slot(slot)?.handle.tier)
    }

    /// Whether a read of a host block may move it to the GPU tier (so the caller takes the
    /// lock off its async workers: see [`Store::begin_read`]).
    pub fn reads_reach_device(&self) -> bool {
        self.gpu.is_some() && self.gpu_policy.promote
    }

    /// Whether sealing a put may move it to the GPU tier ([`Store::place_put`]).
    pub fn puts_reach_device(&self) -> bool {
        self.gpu.is_some() && self.gpu_policy.puts
    }

    /// Moves an unpinned slot up into `up` when room can be made there: the move, not yet
    /// recorded (callers say what it was), or `None` when it stays where it is.
    fn raise(
        &mut self,
        slot: SlotId,
        bytes: &[u8],
        up: Tier,
    ) -> Result<Option<TierMove>, StoreError> {
        let s = self.slot(slot)?.clone();
        if s.pins > 0 {
            return Ok(None);
        }
        // Pinned while room is made: demotions into its tier must not pick it as a victim.
        self.slot_mut(slot)?.pins += 1;
        let room = self.make_room(up, s.handle.len);
        self.slot_mut(slot)?.pins -= 1;
        if !room? {
            return Ok(None);
        }
        let to = self.relocate_bytes(slot, bytes, up)?;
        Ok(Some(TierMove {
            slot,
            id: s.id,
            namespace: s.namespace,
            from: s.handle.tier,
            to: to.tier,
        }))
    }

    /// Writes a slot's bytes into `to` (or below), frees the old copy, updates policies.
    fn move_slot(&mut self, slot: SlotId, bytes: &[u8], to: Tier) -> Result<(), StoreError> {
        let s = self.slot(slot)?.clone();
        let handle = self.relocate_bytes(slot, bytes, to)?;
        self.note_move(TierMove {
            slot,
            id: s.id,
            namespace: s.namespace,
            from: s.handle.tier,
            to: handle.tier,
        });
        Ok(())
    }

    /// [`Store::move_slot`] without recording the move; returns the new handle.
    fn relocate_bytes(
        &mut self,
        slot: SlotId,
        bytes: &[u8],
        to: Tier,
    ) -> Result<Handle, StoreError> {
        let s = self.slot(slot)?.clone();
        let handle = self.place(&s.id, &s.namespace, bytes, to)?;
        self.tier_mut(s.handle.tier)
            .expect("present")
            .free(&s.handle)?;
        if let Some(p) = &mut self.policies[tier_index(s.handle.tier)] {
            p.remove(slot);
        }
        if let Some(p) = &mut self.policies[tier_index(handle.tier)] {
            p.insert(slot, handle.len.0);
        }
        self.slot_mut(slot)?.handle = handle;
        Ok(handle)
    }

    /// Compacts the disk tier and re-points moved slots. Returns bytes reclaimed.
    pub fn compact_disk(&mut self) -> Result<u64, StoreError> {
        let Some(disk) = self.disk.as_mut() else {
            return Ok(0);
        };
        let report = disk.compact()?;
        let mut moved: std::collections::HashMap<Handle, Handle> =
            report.relocations.iter().copied().collect();
        for s in self.slots.values_mut() {
            if let Some(new) = moved.remove(&s.handle) {
                s.handle = new;
            }
        }
        self.forget_quarantined(report.quarantined.iter().map(|(_, h)| *h));
        Ok(report.bytes_reclaimed)
    }

    /// Verifies every block on disk; corrupt ones are quarantined by the tier and forgotten
    /// here. Returns how many were quarantined.
    pub fn scrub_disk(&mut self) -> u64 {
        let Some(disk) = self.disk.as_mut() else {
            return 0;
        };
        let report = disk.scrub();
        let n = report.quarantined.len() as u64;
        self.forget_quarantined(report.quarantined.iter().map(|(_, h)| *h));
        n
    }

    /// Forgets the slots whose disk handles the tier has quarantined.
    fn forget_quarantined(&mut self, handles: impl Iterator<Item = Handle>) {
        let dead: std::collections::HashSet<Handle> = handles.collect();
        if dead.is_empty() {
            return;
        }
        let slots: Vec<SlotId> = self
            .slots
            .iter()
            .filter(|(_, s)| dead.contains(&s.handle))
            .map(|(id, _)| *id)
            .collect();
        for slot in slots {
            self.counters.verify_failures += 1;
            self.remove_slot(slot);
        }
    }
}
