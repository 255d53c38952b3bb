//! Zero-copy puts: reserve room for a block in the host arena, let the caller write the payload
//! straight into it (from a socket, say), then seal it in place.
//!
//! Sealing in place hashes the bytes where they lie, so a put costs one pass of blake3 and no
//! copy. A reservation is not a block: it has no id, is never evicted or read, and must be
//! sealed or cancelled.

use super::seal::Candidate;
use super::{PutForm, Sealed, Store};
use crate::block::{BlockHeader, HEADER_LEN};
use crate::error::StoreError;
use crate::geometry::ModelGeometry;
use crate::handle::{Handle, Tier};
use crate::id::NamespaceKey;
use crate::rope::{rotate_block, Direction};
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// Room for one block in the host arena, being filled by the caller.
#[must_use = "a reservation holds arena space; seal or cancel it"]
#[derive(Debug)]
pub struct Reservation {
    handle: Handle,
    geometry_name: String,
}

impl Store {
    /// Reserves host-arena room for one block of `geometry`, making room by policy.
    pub fn reserve(&mut self, geometry: &ModelGeometry) -> Result<Reservation, StoreError> {
        if !geometry.is_storable() {
            return Err(StoreError::NotStorable {
                name: geometry.name.clone(),
                kind: geometry.kind().name(),
            });
        }
        let len = ByteCount(HEADER_LEN as u64 + geometry.block_layout().payload_len);
        if !self.make_room(Tier::Host, len)? {
            return Err(StoreError::Full { needed: len });
        }
        let handle = self.host.allocate(len)?;
        Ok(Reservation {
            handle,
            geometry_name: geometry.name.clone(),
        })
    }

    /// The payload bytes of a reservation, to be written by the caller.
    pub fn reservation_payload(&mut self, r: &Reservation) -> Result<&mut [u8], StoreError> {
        Ok(&mut self.host.view_mut(&r.handle)?[HEADER_LEN..])
    }

    /// Seals a filled reservation under `namespace`; the caller gets one reference. A rotated
    /// put is un-rotated in place. If equal bytes are already stored, the reservation is freed
    /// and the stored block shared.
    pub fn seal_reserved(
        &mut self,
        r: Reservation,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
    ) -> Result<Sealed, StoreError> {
        if r.geometry_name != geometry.name {
            let reserved = r.geometry_name.clone();
            self.cancel(r)?;
            return Err(StoreError::Header(format!(
                "reservation was made for `{reserved}`, sealed as `{}`",
                geometry.name
            )));
        }
        let header = BlockHeader::for_geometry(geometry).encode();
        let bytes = self.host.view_mut(&r.handle)?;
        bytes[..HEADER_LEN].copy_from_slice(&header);
        if let PutForm::Rotated { position } = form {
            let layout = geometry.block_layout();
            if let Err(e) = rotate_block(
                &layout,
                &mut bytes[HEADER_LEN..],
                position,
                Direction::Inverse,
            ) {
                self.cancel(r)?;
                return Err(e);
            }
        }
        let h = r.handle;
        let id = self.hasher.id(namespace, &[self.host.view(&h)?]);
        self.finish_admit(id, namespace, Candidate::Host(h), Some(h), Tier::Host)
            .inspect_err(|_| {
                // Not installed: give the room back (a second free is refused by the generation).
                let _ = self.host.free(&h);
            })
    }

    /// Gives a reservation's room back.
    pub fn cancel(&mut self, r: Reservation) -> Result<(), StoreError> {
        self.host.free(&r.handle)
    }
}
