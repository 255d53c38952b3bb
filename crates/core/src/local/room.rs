//! Room in the host arena for a put or an install: reserved at once when it is there, made
//! by demoting blocks to disk otherwise (the disk writes outside the lock), and, when the
//! room is held by work in flight (other puts' reservations, pinned reads, demotions), waited
//! for up to [`LocalNode::reserve_wait_ms_max`] instead of refusing the put while a lower tier
//! has space. A put is refused with `Full` only when no room can be made (every host block
//! referenced and nowhere to move it) or the wait runs out.
//!
//! Also promotions after a disk hit: the copy into the host arena runs outside the lock.

use std::time::Duration;

use kvfabric_store::{
    ByteCount, Demotion, ModelGeometry, Promotion, Reservation, RoomStep, SlotId, Store,
    StoreError, Tier, VerifiedBlock,
};

use super::{block_in_place, LocalError, LocalNode};

/// Default bound on waiting for host room held by work in flight.
pub const RESERVE_WAIT_MS_DEFAULT: u64 = 5_000;

/// Room-making steps one reservation may take (each frees or moves one block) before it
/// counts as failed.
const ROOM_STEPS_MAX: usize = 4_096;

/// What to reserve.
#[derive(Clone, Copy)]
pub(crate) enum Want<'a> {
    /// One block of a geometry (a put).
    Block(&'a ModelGeometry),
    /// A block of this many bytes (header ‖ payload), an install of a verified block.
    Bytes(ByteCount),
}

impl Want<'_> {
    fn len(&self) -> Result<ByteCount, StoreError> {
        match self {
            Want::Block(g) => Store::block_len(g),
            Want::Bytes(n) => Ok(*n),
        }
    }

    fn try_reserve(&self, store: &mut Store) -> Result<Option<Reservation>, StoreError> {
        match self {
            Want::Block(g) => store.try_reserve(g),
            Want::Bytes(n) => store.try_reserve_bytes(*n),
        }
    }
}

/// What one locked step decided.
enum Next {
    Reserved(Reservation),
    Demote(Box<Demotion>),
    Wait,
}

impl LocalNode {
    /// Reserves host room for `want`, making room or waiting for it as the module docs say.
    pub(crate) async fn reserve(&self, want: Want<'_>) -> Result<Reservation, LocalError> {
        let len = want.len()?;
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.reserve_wait_ms_max);
        let mut steps = 0usize;
        loop {
            // Registered before the check, so a release between the check and the wait
            // still wakes us.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let next = self.with_io(|l| loop {
                if let Some(r) = want.try_reserve(&mut l.store)? {
                    return Ok(Next::Reserved(r));
                }
                steps += 1;
                if steps > ROOM_STEPS_MAX {
                    return Err(StoreError::Full { needed: len }.into());
                }
                match l.store.room_step(Tier::Host, len)? {
                    RoomStep::Fits | RoomStep::Progress => continue,
                    RoomStep::Demote(d) => return Ok(Next::Demote(d)),
                    RoomStep::Full { transient: true } => return Ok(Next::Wait),
                    RoomStep::Full { transient: false } => {
                        return Err(StoreError::Full { needed: len }.into())
                    }
                }
            })?;
            match next {
                Next::Reserved(r) => return Ok(r),
                Next::Demote(d) => {
                    let outcome = block_in_place(|| d.run());
                    let finished = self.with(|l| Ok(l.store.finish_demotion(*d, outcome)?));
                    self.room.notify_waiters();
                    finished?;
                }
                Next::Wait => {
                    if tokio::time::timeout_at(deadline, room).await.is_err() {
                        return Err(StoreError::Full { needed: len }.into());
                    }
                }
            }
        }
    }

    /// Moves a block just read from disk up to the host tier if room can be made without
    /// waiting; the copy runs outside the lock. Best effort: a promotion that cannot happen
    /// now is skipped (the block stays on disk, and is served all the same).
    pub(crate) fn promote(&self, slot: SlotId, block: &VerifiedBlock) {
        let len = ByteCount(block.bytes().len() as u64);
        let mut promotion = None;
        for _ in 0..ROOM_STEPS_MAX {
            let next = self.with_io(|l| {
                Ok(match l.store.room_step(Tier::Host, len)? {
                    RoomStep::Fits => Up::Begin(l.store.begin_promote(slot)?),
                    RoomStep::Progress => Up::Again,
                    RoomStep::Demote(d) => Up::Demote(d),
                    RoomStep::Full { .. } => Up::Begin(None),
                })
            });
            match next {
                Ok(Up::Begin(p)) => {
                    promotion = p;
                    break;
                }
                Ok(Up::Again) => {}
                Ok(Up::Demote(d)) => {
                    let outcome = block_in_place(|| d.run());
                    let _ = self.with(|l| Ok(l.store.finish_demotion(*d, outcome)?));
                    self.room.notify_waiters();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "promotion skipped");
                    return;
                }
            }
        }
        let Some(mut p) = promotion else {
            return;
        };
        let filled = p.fill(block.bytes());
        if let Err(e) = self.with_io(|l| Ok(l.store.finish_promote(p)?)) {
            tracing::warn!(error = %e, "finishing a promotion failed");
        }
        if let Err(e) = filled {
            tracing::warn!(error = %e, "filling a promotion failed");
        }
    }
}

/// What one locked step of a promotion decided.
enum Up {
    /// Room is there: the promotion, if the block can move.
    Begin(Option<Promotion>),
    /// Room was made; look again.
    Again,
    /// A host block goes to disk first.
    Demote(Box<Demotion>),
}
