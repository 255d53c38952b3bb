//! Copy-on-write forks: a [`Draft`] shares its base block until the first write.

use super::{Dedup, PutForm, Sealed, SlotId, Store};
use crate::block::HEADER_LEN;
use crate::error::StoreError;
use crate::geometry::ModelGeometry;
use crate::id::NamespaceKey;

/// A fork of a stored block. Holds a reference on its base until the first write copies the
/// bytes; finish it with [`Store::commit`] or [`Store::abandon`] (dropping it leaks the
/// reference, which keeps the base alive: safe, never a dangling use).
#[must_use = "a draft holds a reference; commit or abandon it"]
#[derive(Debug)]
pub struct Draft {
    base: Option<SlotId>,
    namespace: NamespaceKey,
    payload: Option<Vec<u8>>,
}

impl Draft {
    /// Whether the draft still shares its base (no write yet).
    pub fn is_shared(&self) -> bool {
        self.payload.is_none()
    }
}

impl Store {
    /// Forks `slot`: takes a reference on it; no bytes are copied yet.
    pub fn fork(&mut self, slot: SlotId) -> Result<Draft, StoreError> {
        let s = self.slot_mut(slot)?;
        s.refs += 1;
        Ok(Draft {
            base: Some(slot),
            namespace: s.namespace,
            payload: None,
        })
    }

    /// The draft's payload for writing; the first call copies it and drops the base reference.
    pub fn draft_mut<'d>(&mut self, draft: &'d mut Draft) -> Result<&'d mut [u8], StoreError> {
        if draft.payload.is_none() {
            let base = draft.base.take().expect("a shared draft has a base");
            let mut bytes = self.read_slot(base)?;
            self.release(base)?;
            draft.payload = Some(bytes.split_off(HEADER_LEN));
        }
        Ok(draft.payload.as_mut().expect("just copied"))
    }

    /// Seals the draft: an unwritten draft hands its base reference over; a written one is
    /// sealed as new content (canonical form) of `geometry`.
    pub fn commit(&mut self, draft: Draft, geometry: &ModelGeometry) -> Result<Sealed, StoreError> {
        match (draft.base, draft.payload) {
            (Some(base), None) => {
                let s = self.slot(base)?;
                Ok(Sealed {
                    id: s.id,
                    slot: base,
                    dedup: Dedup::Shared,
                    bytes: s.handle.len,
                })
            }
            (None, Some(payload)) => {
                let tokens = u64::from(geometry.block_tokens());
                self.seal(
                    &draft.namespace,
                    geometry,
                    tokens,
                    &payload,
                    PutForm::Canonical,
                )
            }
            _ => unreachable!("a draft has exactly one of base and payload"),
        }
    }

    /// Drops a draft, releasing its base reference if it still holds one.
    pub fn abandon(&mut self, draft: Draft) -> Result<(), StoreError> {
        if let Some(base) = draft.base {
            self.release(base)?;
        }
        Ok(())
    }
}
