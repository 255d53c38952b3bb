//! Sealing: canonicalise, hash, dedup with a full byte comparison, place.

use std::borrow::Cow;

use super::{tier_index, SlotId, Store};
use crate::block::{BlockHeader, HEADER_LEN};
use crate::error::StoreError;
use crate::geometry::ModelGeometry;
use crate::handle::{Handle, Tier};
use crate::id::{BlockId, NamespaceKey};
use crate::rope::{rotate_block, Direction};
use crate::tier::TierBackend;
use crate::units::ByteCount;
use crate::verified::VerifiedBlock;

/// How a put hands over `k_rope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutForm {
    /// Un-rotated, as the engine has it before applying RoPE: identity is position-free.
    Canonical,
    /// Rotated with the first token at `position`; the store un-rotates (rounding once).
    Rotated {
        /// Position of the block's first token.
        position: u64,
    },
}

/// What dedup decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedup {
    /// New content.
    New,
    /// Equal bytes were already stored; they are shared.
    Shared,
    /// The id matched stored bytes that differ; the candidate got its own slot.
    Collision,
}

impl Dedup {
    /// Lowercase name used by the API.
    pub const fn name(self) -> &'static str {
        match self {
            Dedup::New => "new",
            Dedup::Shared => "shared",
            Dedup::Collision => "collision",
        }
    }
}

/// The result of a seal: the caller now holds one reference on `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// Content id.
    pub id: BlockId,
    /// The slot the caller holds a reference on.
    pub slot: SlotId,
    /// What dedup decided.
    pub dedup: Dedup,
    /// Block bytes (header ‖ payload).
    pub bytes: ByteCount,
}

impl Store {
    /// Seals a payload of `geometry` under `namespace`. The caller gets one reference.
    pub fn seal(
        &mut self,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        tokens: u64,
        payload: &[u8],
        form: PutForm,
    ) -> Result<Sealed, StoreError> {
        if !geometry.is_storable() {
            return Err(StoreError::NotStorable {
                name: geometry.name.clone(),
                kind: geometry.kind().name(),
            });
        }
        let layout = geometry.block_layout();
        if tokens != u64::from(layout.block_tokens) {
            return Err(StoreError::TokenCount {
                expected: layout.block_tokens,
                found: tokens,
            });
        }
        if payload.len() as u64 != layout.payload_len {
            return Err(StoreError::PayloadLength {
                expected: layout.payload_len,
                found: payload.len() as u64,
            });
        }
        let payload: Cow<'_, [u8]> = match form {
            PutForm::Canonical => Cow::Borrowed(payload),
            PutForm::Rotated { position } => {
                let mut owned = payload.to_vec();
                rotate_block(&layout, &mut owned, position, Direction::Inverse)?;
                Cow::Owned(owned)
            }
        };
        let header = BlockHeader::for_geometry(geometry).encode();
        self.admit(namespace, None, &header, &payload)
    }

    /// Installs a block that arrived verified (from a peer). The caller gets one reference.
    pub fn install(&mut self, block: &VerifiedBlock) -> Result<Sealed, StoreError> {
        let bytes = block.bytes();
        let header = BlockHeader::decode(bytes)?;
        let payload = &bytes[HEADER_LEN..];
        if payload.len() as u64 != header.payload_len {
            return Err(StoreError::PayloadLength {
                expected: header.payload_len,
                found: payload.len() as u64,
            });
        }
        let ns = block.namespace();
        self.admit(&ns, Some(block.id()), &bytes[..HEADER_LEN], payload)
    }

    /// Hash (unless `known` already is the verified id), dedup, place.
    fn admit(
        &mut self,
        namespace: &NamespaceKey,
        known: Option<BlockId>,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sealed, StoreError> {
        let len = ByteCount((header.len() + payload.len()) as u64);
        // Fast path: when the host arena has room without evicting anything, hash each chunk
        // as it is copied in (one pass over the payload). Under pressure, hash first: making
        // room could evict an equal cached block that dedup should have found.
        let top = self.tiers()[0];
        let mut placed: Option<Handle> = None;
        let id = match known {
            Some(id) => id,
            None if top == Tier::Host && self.host.can_fit(len) => {
                let mut stream = self.hasher.begin(namespace);
                let h = self
                    .host
                    .write_parts_with(&[header, payload], &mut |c| stream.update(c))?;
                placed = Some(h);
                stream.finish()
            }
            None => self.hasher.id(namespace, &[header, payload]),
        };
        self.finish_admit(
            id,
            namespace,
            Candidate::Parts(header, payload),
            placed,
            top,
            &[],
        )
    }

    /// Dedups `candidate` (already hashed to `id`) against the stored slots and either shares
    /// an equal one (freeing `placed`) or keeps the candidate as a new slot, placing it first
    /// if it has no handle yet. Slots in `known` were already compared with the candidate
    /// (slot, whether its bytes are equal); the rest are compared here.
    pub(super) fn finish_admit(
        &mut self,
        id: BlockId,
        namespace: &NamespaceKey,
        candidate: Candidate<'_>,
        placed: Option<Handle>,
        top: Tier,
        known: &[(SlotId, bool)],
    ) -> Result<Sealed, StoreError> {
        let len = ByteCount(match candidate {
            Candidate::Parts(h, p) => (h.len() + p.len()) as u64,
            Candidate::Host(h) => h.len.0,
        });
        let mut collided = false;
        for slot in self.slots_of(&id, namespace) {
            let equal = match known.iter().find(|(s, _)| *s == slot) {
                Some((_, eq)) => *eq,
                None => self.bytes_equal(slot, candidate)?,
            };
            if equal {
                if let Some(h) = placed {
                    self.host.free(&h)?;
                }
                let s = self.slot_mut(slot)?;
                s.refs += 1;
                let tier = s.handle.tier;
                if let Some(p) = &mut self.policies[tier_index(tier)] {
                    p.touch(slot);
                }
                self.counters.seals_shared += 1;
                return Ok(Sealed {
                    id,
                    slot,
                    dedup: Dedup::Shared,
                    bytes: len,
                });
            }
            collided = true;
        }
        let handle = match (placed, candidate) {
            (Some(h), _) => h,
            (None, Candidate::Parts(header, payload)) => {
                let bytes = [header, payload].concat();
                self.place(&id, namespace, &bytes, top)?
            }
            (None, Candidate::Host(h)) => h,
        };
        let slot = self.add_slot(id, *namespace, handle, 1);
        let dedup = if collided {
            self.counters.dedup_collisions += 1;
            Dedup::Collision
        } else {
            self.counters.seals_new += 1;
            Dedup::New
        };
        Ok(Sealed {
            id,
            slot,
            dedup,
            bytes: len,
        })
    }

    /// Compares a stored slot with a candidate, in place where both live in the host arena.
    fn bytes_equal(&mut self, slot: SlotId, candidate: Candidate<'_>) -> Result<bool, StoreError> {
        let s = self.slot(slot)?.clone();
        let stored = if s.handle.tier == Tier::Host {
            None
        } else {
            match self.read_slot(slot) {
                Ok(b) => Some(b),
                // A quarantined copy is gone; it cannot be equal.
                Err(StoreError::Corrupt { .. }) => return Ok(false),
                Err(e) => return Err(e),
            }
        };
        let stored: &[u8] = match &stored {
            Some(b) => b,
            None => self.host.view(&s.handle)?,
        };
        Ok(match candidate {
            Candidate::Parts(header, payload) => {
                stored.len() == header.len() + payload.len()
                    && stored[..header.len()] == *header
                    && stored[header.len()..] == *payload
            }
            Candidate::Host(h) => stored == self.host.view(&h)?,
        })
    }
}

/// The bytes a seal offers for dedup.
#[derive(Clone, Copy)]
pub(super) enum Candidate<'a> {
    /// Header and payload in caller memory.
    Parts(&'a [u8], &'a [u8]),
    /// A whole block already written into the host arena (a reservation).
    Host(Handle),
}
