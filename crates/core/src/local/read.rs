//! Reads of held blocks with no byte work under the lock: a host block is served from its
//! place in the arena (no copy), pinned until the last view of it is dropped (the HTTP body
//! sent, the transport done); a disk block is read and verified outside the lock, then
//! promoted when room can be made; a GPU block is copied off the device and verified outside
//! the lock.
//!
//! Only a client's read promotes ([`ReadUse::Hit`]). A read that copies the block to another
//! node ([`ReadUse::Copy`]: a peer's fetch, a put's or a repair's push) leaves it where it
//! is: a promotion *moves* the block, so a repair walking cold blocks would otherwise carry
//! each one's disk copy into memory, where the node's death loses it (a chaos run lost an
//! acknowledged block so: promoted by a repair's read, its holder killed before the block
//! went back down), and evict the blocks clients use to make room.

use std::sync::Arc;

use bytes::Bytes;
use kvfabric_store::{
    BlockId, NamespaceKey, PinnedRead, ReadStep, SlotId, Store, StoreError, Tier, VerifiedBlock,
};

use super::{block_in_place, Local, LocalError, LocalNode};

/// A block read from this node: header ‖ payload, verified when it was sealed or read back.
#[derive(Debug, Clone)]
pub struct LocalRead {
    /// Header ‖ payload (a view into the host arena, or a buffer read from disk).
    pub bytes: Bytes,
    /// The tier it was served from.
    pub tier: Tier,
}

/// Keeps a host block pinned while views of it live; unpins when the last one is dropped.
struct PinGuard {
    pinned: Option<PinnedRead>,
    node: Arc<LocalNode>,
}

impl AsRef<[u8]> for PinGuard {
    fn as_ref(&self) -> &[u8] {
        self.pinned.as_ref().map_or(&[], |p| p.bytes())
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        // A plain lock: unpinning is cheap, and a view may be dropped anywhere (a runtime
        // shutting down included), where `block_in_place` is not allowed.
        if let Some(p) = self.pinned.take() {
            self.node.release_pin(p);
        }
    }
}

/// Why a block is read (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadUse {
    /// A client's read: a block read from disk moves up to memory when room can be made.
    Hit,
    /// A copy for another node: the block stays in its tier.
    Copy,
}

/// Which block of an id to read.
#[derive(Debug, Clone, Copy)]
enum Which {
    /// The first readable one (variant 0; a later one after a quarantine).
    First,
    /// The `n`-th sealed under the id (a dedup collision's variants).
    Variant(u32),
}

impl LocalNode {
    /// Reads `id` from the first namespace of `read` that holds it: the block and the tier it
    /// was served from; `None` when none does.
    ///
    /// Every namespace of `read` is probed (no early exit) so the work does not depend on
    /// where, or whether, the id is held.
    pub fn read(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: &BlockId,
    ) -> Result<Option<LocalRead>, LocalError> {
        self.read_which(read, id, Which::First, ReadUse::Hit)
    }

    /// [`LocalNode::read`] for a copy sent to another node (a peer's fetch): the block stays
    /// in its tier (a client's read of a disk block moves it up to memory).
    pub fn read_copy(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: &BlockId,
    ) -> Result<Option<LocalRead>, LocalError> {
        self.read_which(read, id, Which::First, ReadUse::Copy)
    }

    /// Reads the `variant`-th block this node holds under `id` (in the order they were sealed;
    /// more than one only after a dedup collision); variant 0 is [`LocalNode::read`].
    pub fn read_variant(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: &BlockId,
        variant: u32,
    ) -> Result<Option<LocalRead>, LocalError> {
        match variant {
            0 => self.read(read, id),
            v => self.read_which(read, id, Which::Variant(v), ReadUse::Hit),
        }
    }

    /// Reads `id` like [`LocalNode::read_copy`] (the block stays in its tier), as a
    /// [`VerifiedBlock`] of its own (a host block's bytes copied out of the arena, outside the
    /// lock; nothing hashed again): for a block sent apart from this node (a copy pushed to a
    /// peer).
    pub fn get(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: &BlockId,
    ) -> Result<Option<VerifiedBlock>, LocalError> {
        self.read_with(
            read,
            id,
            Which::First,
            ReadUse::Copy,
            |node, pinned| {
                let block = pinned.to_verified();
                node.release_pin(pinned);
                Ok(block)
            },
            |b, _| b,
        )
    }

    /// Hands a pinned read back.
    fn release_pin(&self, pinned: PinnedRead) {
        match self.lock() {
            Ok(mut l) => {
                if let Err(e) = l.store.unpin_read(pinned) {
                    tracing::error!(error = %e, "unpinning a read block failed");
                }
            }
            Err(e) => tracing::error!(error = %e, "unpinning a read block failed"),
        }
        self.room.notify_waiters();
    }

    fn read_which(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: &BlockId,
        which: Which,
        usage: ReadUse,
    ) -> Result<Option<LocalRead>, LocalError> {
        self.read_with(
            read,
            id,
            which,
            usage,
            |node, pinned| {
                let guard = PinGuard {
                    pinned: Some(pinned),
                    node: Arc::clone(node),
                };
                Ok(LocalRead {
                    bytes: Bytes::from_owner(guard),
                    tier: Tier::Host,
                })
            },
            |block, tier| LocalRead {
                bytes: Bytes::from(block.into_bytes()),
                tier,
            },
        )
    }

    /// The read loop: `host` serves a pinned host block, `owned` a block read into a buffer
    /// of its own (from disk, or from the GPU tier); a disk block is promoted after a
    /// [`ReadUse::Hit`].
    fn read_with<T>(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: &BlockId,
        which: Which,
        usage: ReadUse,
        host: impl FnOnce(&Arc<Self>, PinnedRead) -> Result<T, LocalError>,
        owned: impl FnOnce(VerifiedBlock, Tier) -> T,
    ) -> Result<Option<T>, LocalError> {
        // Each pass that does not serve quarantines a slot, so this ends.
        loop {
            let step = self.with(|l| begin(l, read, id, which))?;
            let Some((ns, step)) = step else {
                return Ok(None);
            };
            match step {
                ReadStep::Host(pinned) => return host(self, pinned).map(Some),
                ReadStep::Disk(d) => {
                    let slot = d.slot();
                    let outcome = block_in_place(|| d.run());
                    let done = self.finish_outside(&ns, id, slot, |store| {
                        store.finish_disk_read(d, outcome)
                    })?;
                    if let Some(block) = done {
                        if usage == ReadUse::Hit {
                            self.promote(slot, &block);
                        }
                        return Ok(Some(owned(block, Tier::Disk)));
                    }
                }
                ReadStep::Gpu(d) => {
                    let slot = d.slot();
                    let outcome = block_in_place(|| d.run());
                    let done = self
                        .finish_outside(&ns, id, slot, |store| store.finish_gpu_read(d, outcome))?;
                    if let Some(block) = done {
                        return Ok(Some(owned(block, Tier::Gpu)));
                    }
                }
                ReadStep::InPlace(slot) => {
                    let done = self.with_io(|l| match l.store.get_slot(slot) {
                        Ok(found) => Ok(Some(found)),
                        Err(StoreError::Corrupt { .. }) | Err(StoreError::StaleSlot(_)) => {
                            l.forget_slot(&ns, id, slot);
                            Ok(None)
                        }
                        Err(e) => Err(e.into()),
                    })?;
                    if let Some((block, tier)) = done {
                        return Ok(Some(owned(block, tier)));
                    }
                }
            }
        }
    }
}

impl LocalNode {
    /// Hands a read run outside the lock back to the store (`finish`): the block, or `None`
    /// when it did not verify and was quarantined (the slot is forgotten; the caller tries the
    /// next one).
    fn finish_outside(
        &self,
        ns: &NamespaceKey,
        id: &BlockId,
        slot: SlotId,
        finish: impl FnOnce(&mut Store) -> Result<VerifiedBlock, StoreError>,
    ) -> Result<Option<VerifiedBlock>, LocalError> {
        let done = self.with(|l| match finish(&mut l.store) {
            Ok(b) => Ok(Some(b)),
            Err(StoreError::Corrupt { .. }) => {
                l.forget_slot(ns, id, slot);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        });
        self.room.notify_waiters();
        done
    }
}

/// Under the lock: which slot to read, and its read begun.
fn begin(
    l: &mut Local,
    read: &[NamespaceKey],
    id: &BlockId,
    which: Which,
) -> Result<Option<(NamespaceKey, ReadStep)>, LocalError> {
    let Some(ns) = l.find(read, id) else {
        return Ok(None);
    };
    let slot = match which {
        Which::First => l.held.slots(&ns, id).and_then(|s| s.first().copied()),
        Which::Variant(v) => l.variant_slot(read, id, v).map(|(_, s)| s),
    };
    let Some(slot) = slot else {
        if matches!(which, Which::First) {
            l.forget(&ns, id);
        }
        return Ok(None);
    };
    match l.store.begin_read(slot) {
        Ok(step) => Ok(Some((ns, step))),
        // Its bytes are gone from the store (quarantined): not held any more.
        Err(StoreError::StaleSlot(_)) => {
            l.forget_slot(&ns, id, slot);
            match which {
                Which::First => begin(l, read, id, which),
                Which::Variant(_) => Ok(None),
            }
        }
        Err(e) => Err(e.into()),
    }
}
