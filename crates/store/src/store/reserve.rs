//! Zero-copy puts: reserve room for a block in the host arena, let the caller write the payload
//! straight into it (from a socket, say), then seal it in place.
//!
//! A [`Reservation`] owns its bytes: it is filled through `&mut` access of its own, without the
//! store, so the owner of a shared store fills (and hashes) reservations outside its lock. A
//! reservation is not a block: it has no id, is never evicted or read by the store, and must
//! be sealed or cancelled.
//!
//! Sealing is split so that the expensive part needs no store either: [`Reservation::fill`]
//! copies the payload in and hashes it as it goes (a canonical put: a large one on a thread
//! of its own, a span behind the copy, [`super::fill_hasher`]), and
//! [`Filling::finish`] (or [`Reservation::prepare`]) writes the header, un-rotates a rotated
//! put and hashes, giving a [`Prepared`] block whose id the store computed from the bytes
//! that sit there. The store then only decides dedup ([`Store::seal_prepared`], in
//! [`super::seal_split`]). [`Store::seal_reserved`] does all of it in one call.

use std::sync::Arc;

use super::fill_hasher::{cores_to_spare, FillHasher};
use super::seal_split::SealStep;
use super::{PutForm, Sealed, Store};
use crate::block::{BlockHeader, HEADER_LEN};
use crate::error::StoreError;
use crate::geometry::ModelGeometry;
use crate::handle::{Handle, Tier};
use crate::hash_parallel::TWO_THREADS_MIN_BYTES;
use crate::id::{BlockId, IdHasher, IdStream, NamespaceKey};
use crate::rope::{rotate_block, Direction};
use crate::tier::host::COPY_CHUNK_BYTES;
use crate::tier::host_region::RegionBuf;
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// Room for one block in the host arena, being filled by the caller.
#[must_use = "a reservation holds arena space; seal or cancel it"]
pub struct Reservation {
    pub(super) handle: Handle,
    pub(super) geometry_name: String,
    /// The store that handed it out: a reservation is sealed or cancelled only there.
    pub(super) store: u64,
    /// The region holding `handle`'s range, which only this reservation touches.
    region: Arc<RegionBuf>,
    /// The store's id hasher: a prepared block's id is always the store's own.
    hasher: Arc<dyn IdHasher>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("handle", &self.handle)
            .field("geometry", &self.geometry_name)
            .finish()
    }
}

impl Reservation {
    pub(super) fn new(
        handle: Handle,
        geometry_name: String,
        store: u64,
        region: Arc<RegionBuf>,
        hasher: Arc<dyn IdHasher>,
    ) -> Reservation {
        Reservation {
            handle,
            geometry_name,
            store,
            region,
            hasher,
        }
    }

    /// The whole block (header ‖ payload).
    fn block_mut(&mut self) -> &mut [u8] {
        // SAFETY: the ledger gave this range to this reservation alone; the store touches it
        // only once the reservation is handed back by value, and `&mut self` excludes every
        // other borrow of it here.
        unsafe {
            self.region
                .slice_mut(self.handle.offset as usize, self.handle.len.as_usize())
        }
    }

    /// The whole block, read-only.
    pub(super) fn block(&self) -> &[u8] {
        // SAFETY: as in `block_mut`; `&self` excludes a writer.
        unsafe {
            self.region
                .slice(self.handle.offset as usize, self.handle.len.as_usize())
        }
    }

    /// The payload bytes, to be written by the caller (no store needed).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.block_mut()[HEADER_LEN..]
    }

    /// `len` payload bytes at `at`, borrowed alone (a filling's hashing thread may be reading
    /// the bytes before them). Panics past the payload, as slicing does.
    fn payload_range_mut(&mut self, at: usize, len: usize) -> &mut [u8] {
        assert!(
            at + len <= self.payload_len() as usize,
            "{len} bytes at {at} run past the payload"
        );
        // SAFETY: inside this reservation's range, which only it touches; `&mut self` excludes
        // every other borrow of it here, and a hashing thread reads only bytes before `at`.
        unsafe {
            self.region
                .slice_mut(self.handle.offset as usize + HEADER_LEN + at, len)
        }
    }

    /// Payload bytes the block has room for.
    pub fn payload_len(&self) -> u64 {
        self.handle.len.0 - HEADER_LEN as u64
    }

    /// Starts filling the payload front to back. A canonical put is hashed while it is copied
    /// in: a large one on a machine with cores to spare on a thread of its own, span by span
    /// behind the copy ([`PutHashing::OwnThread`]), others in the same pass, each piece still
    /// in cache ([`PutHashing::SamePass`]); a rotated one is hashed by [`Filling::finish`]
    /// after it is un-rotated.
    pub fn fill(
        self,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
    ) -> Result<Filling, Box<Unprepared>> {
        // Below the size worth a second thread, starting one costs more than the overlap saves.
        let hashing = if self.handle.len.as_usize() >= TWO_THREADS_MIN_BYTES && cores_to_spare() {
            PutHashing::OwnThread
        } else {
            PutHashing::SamePass
        };
        self.fill_as(namespace, geometry, form, hashing)
    }

    /// [`Reservation::fill`] with the hashing of a canonical put chosen by the caller.
    pub fn fill_as(
        mut self,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
        hashing: PutHashing,
    ) -> Result<Filling, Box<Unprepared>> {
        if let Err(error) = self.check_geometry(geometry) {
            return Err(Box::new(Unprepared {
                reservation: self,
                error,
            }));
        }
        let header = BlockHeader::for_geometry(geometry).encode();
        self.block_mut()[..HEADER_LEN].copy_from_slice(&header);
        let mut stream = match form {
            PutForm::Canonical => Some(self.hasher.begin(namespace)),
            PutForm::Rotated { .. } => None,
        };
        let mut pipeline = None;
        if hashing == PutHashing::OwnThread {
            if let Some(s) = stream.take() {
                let region = Arc::clone(&self.region);
                match FillHasher::start(region, self.handle.offset as usize, s) {
                    Some(p) => pipeline = Some(p),
                    // No thread: hashed in the same pass, from the start.
                    None => stream = Some(self.hasher.begin(namespace)),
                }
            }
        }
        Ok(Filling {
            pipeline,
            reservation: self,
            namespace: *namespace,
            geometry: geometry.clone(),
            form,
            stream,
            written: 0,
            hashed: 0,
        })
    }

    /// Seals nothing yet: writes the header, un-rotates a rotated put and hashes the block
    /// under `namespace`, all without the store. The payload must be filled already.
    pub fn prepare(
        self,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
    ) -> Result<Prepared, Box<Unprepared>> {
        let mut f = self.fill_as(namespace, geometry, form, PutHashing::SamePass)?;
        f.written = f.reservation.payload_len();
        f.finish()
    }

    fn check_geometry(&self, geometry: &ModelGeometry) -> Result<(), StoreError> {
        if self.geometry_name != geometry.name {
            return Err(StoreError::Header(format!(
                "reservation was made for `{}`, sealed as `{}`",
                self.geometry_name, geometry.name
            )));
        }
        Ok(())
    }
}

/// Where a canonical put's bytes are hashed as they are copied in ([`Reservation::fill_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutHashing {
    /// On the copying thread, each piece right after its copy.
    SamePass,
    /// On a thread of its own, a span behind the copy ([`super::fill_hasher`]); the same pass
    /// when no thread can be started.
    OwnThread,
}

/// A reservation being filled in order, hashed as it fills.
pub struct Filling {
    /// The hashing thread of a large canonical put (first, so that it is stopped before the
    /// reservation is given up, however the filling ends).
    pipeline: Option<FillHasher>,
    reservation: Reservation,
    namespace: NamespaceKey,
    geometry: ModelGeometry,
    form: PutForm,
    /// The id being computed over header ‖ payload in the same pass (small canonical puts).
    stream: Option<Box<dyn IdStream>>,
    /// Payload bytes written.
    written: u64,
    /// Block bytes (header included) fed to `stream`.
    hashed: usize,
}

impl Filling {
    /// Payload bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Payload bytes expected in all.
    pub fn expected(&self) -> u64 {
        self.reservation.payload_len()
    }

    /// Copies the next piece in. Refuses a piece that would run past the payload, leaving the
    /// filling as it was.
    pub fn write(&mut self, piece: &[u8]) -> Result<(), StoreError> {
        let end = self.written + piece.len() as u64;
        if end > self.expected() {
            return Err(StoreError::PayloadLength {
                expected: self.expected(),
                found: end,
            });
        }
        self.reservation
            .payload_range_mut(self.written as usize, piece.len())
            .copy_from_slice(piece);
        self.written = end;
        let filled = HEADER_LEN + self.written as usize;
        if let Some(p) = &mut self.pipeline {
            p.written(filled);
            return Ok(());
        }
        // Hash whole spans while they are still in cache; the tail waits for `finish`.
        if filled - self.hashed >= COPY_CHUNK_BYTES {
            let upto = filled - (filled - self.hashed) % COPY_CHUNK_BYTES;
            self.hash_upto(upto);
        }
        Ok(())
    }

    fn hash_upto(&mut self, upto: usize) {
        if let Some(stream) = self.stream.as_mut() {
            stream.update(&self.reservation.block()[self.hashed..upto]);
            self.hashed = upto;
        }
    }

    /// The block, hashed and ready for [`Store::seal_prepared`]; refused (with the reservation
    /// handed back, to be cancelled) unless every payload byte was written, or when a rotated
    /// put cannot be un-rotated.
    pub fn finish(mut self) -> Result<Prepared, Box<Unprepared>> {
        if self.written != self.expected() {
            let error = StoreError::PayloadLength {
                expected: self.expected(),
                found: self.written,
            };
            return Err(self.unprepared(error));
        }
        let id = match self.form {
            PutForm::Canonical if self.pipeline.is_some() => {
                let p = self.pipeline.take().expect("checked");
                p.finish(self.reservation.block().len()).finish()
            }
            PutForm::Canonical => {
                self.hash_upto(self.reservation.block().len());
                self.stream
                    .take()
                    .expect("a canonical filling hashes")
                    .finish()
            }
            PutForm::Rotated { position } => {
                let layout = self.geometry.block_layout();
                let payload = self.reservation.payload_mut();
                if let Err(e) = rotate_block(&layout, payload, position, Direction::Inverse) {
                    return Err(self.unprepared(e));
                }
                let r = &self.reservation;
                r.hasher.id(&self.namespace, &[r.block()])
            }
        };
        Ok(Prepared {
            reservation: self.reservation,
            id,
            namespace: self.namespace,
        })
    }

    /// Gives the reservation back (to be cancelled), its hashing thread stopped first.
    pub fn into_reservation(self) -> Reservation {
        let Filling {
            pipeline,
            reservation,
            ..
        } = self;
        drop(pipeline);
        reservation
    }

    fn unprepared(self, error: StoreError) -> Box<Unprepared> {
        Box::new(Unprepared {
            reservation: self.into_reservation(),
            error,
        })
    }
}

/// A filled reservation whose id the store computed from the bytes in it; nothing can write
/// them any more.
#[must_use = "a prepared block holds arena space; seal or cancel it"]
pub struct Prepared {
    pub(super) reservation: Reservation,
    pub(super) id: BlockId,
    pub(super) namespace: NamespaceKey,
}

impl Prepared {
    /// The block's id.
    pub fn id(&self) -> BlockId {
        self.id
    }

    /// The namespace it was hashed under.
    pub fn namespace(&self) -> NamespaceKey {
        self.namespace
    }

    /// Gives the reservation back (to be cancelled).
    pub fn into_reservation(self) -> Reservation {
        self.reservation
    }

    /// A reservation filled with the bytes of a block that arrived verified (from a peer):
    /// its id is known, so nothing is hashed again. The bytes are copied here, so they are
    /// exactly the verified ones.
    pub fn verified(
        mut reservation: Reservation,
        block: &crate::verified::VerifiedBlock,
    ) -> Result<Prepared, Box<Unprepared>> {
        if block.bytes().len() as u64 != reservation.handle.len.0 {
            let error = StoreError::PayloadLength {
                expected: reservation.payload_len(),
                found: block.payload().len() as u64,
            };
            return Err(Box::new(Unprepared { reservation, error }));
        }
        for (dst, src) in reservation
            .block_mut()
            .chunks_mut(COPY_CHUNK_BYTES)
            .zip(block.bytes().chunks(COPY_CHUNK_BYTES))
        {
            dst.copy_from_slice(src);
        }
        Ok(Prepared {
            reservation,
            id: block.id(),
            namespace: block.namespace(),
        })
    }
}

/// A reservation that could not be prepared, and why; cancel it.
pub struct Unprepared {
    /// The reservation (still holding arena room).
    pub reservation: Reservation,
    /// Why.
    pub error: StoreError,
}

impl std::fmt::Debug for Unprepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Unprepared({})", self.error)
    }
}

impl Store {
    /// Reserves host-arena room for one block of `geometry`, making room by policy (here,
    /// under the caller's borrow: demotions write the disk; see [`super::room`] for the split
    /// form).
    pub fn reserve(&mut self, geometry: &ModelGeometry) -> Result<Reservation, StoreError> {
        let len = Store::block_len(geometry)?;
        if !self.make_room(Tier::Host, len)? {
            return Err(StoreError::Full { needed: len });
        }
        self.reserve_fitting(geometry.name.clone(), len)
    }

    /// Reserves room for one block of `geometry` only if the host arena has it now (nothing is
    /// evicted or moved); `Ok(None)` otherwise.
    pub fn try_reserve(
        &mut self,
        geometry: &ModelGeometry,
    ) -> Result<Option<Reservation>, StoreError> {
        let len = Store::block_len(geometry)?;
        if !self.host.can_fit(len) {
            return Ok(None);
        }
        self.reserve_fitting(geometry.name.clone(), len).map(Some)
    }

    /// Reserves `len` bytes (header ‖ payload) for a block that arrives whole and verified
    /// ([`Prepared::verified`]), only if the host arena has the room now.
    pub fn try_reserve_bytes(&mut self, len: ByteCount) -> Result<Option<Reservation>, StoreError> {
        if len.0 <= HEADER_LEN as u64 {
            return Err(StoreError::PayloadLength {
                expected: 1,
                found: 0,
            });
        }
        if !self.host.can_fit(len) {
            return Ok(None);
        }
        self.reserve_fitting(String::new(), len).map(Some)
    }

    /// Bytes of one stored block of `geometry` (header ‖ payload); refuses what cannot be
    /// stored as blocks.
    pub fn block_len(geometry: &ModelGeometry) -> Result<ByteCount, StoreError> {
        if !geometry.is_storable() {
            return Err(StoreError::NotStorable {
                name: geometry.name.clone(),
                kind: geometry.kind().name(),
            });
        }
        Ok(ByteCount(
            HEADER_LEN as u64 + geometry.block_layout().payload_len,
        ))
    }

    fn reserve_fitting(
        &mut self,
        geometry_name: String,
        len: ByteCount,
    ) -> Result<Reservation, StoreError> {
        let handle = self.host.allocate(len)?;
        let region = self.host.region(&handle)?;
        self.reservations += 1;
        Ok(Reservation::new(
            handle,
            geometry_name,
            self.instance,
            region,
            Arc::clone(&self.hasher),
        ))
    }

    /// Seals a filled reservation under `namespace`; the caller gets one reference. A rotated
    /// put is un-rotated in place. If equal bytes are already stored, the reservation is freed
    /// and the stored block shared. (All of [`Reservation::prepare`],
    /// [`Store::seal_prepared`] and its comparison in one call.)
    pub fn seal_reserved(
        &mut self,
        r: Reservation,
        namespace: &NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
    ) -> Result<Sealed, StoreError> {
        self.check_mine(r.store)?;
        let prepared = match r.prepare(namespace, geometry, form) {
            Ok(p) => p,
            Err(u) => {
                self.cancel(u.reservation)?;
                return Err(u.error);
            }
        };
        match self.seal_prepared(prepared)? {
            SealStep::Sealed(s) => Ok(s),
            SealStep::Compare(mut c) => {
                c.run();
                self.seal_compared(c)
            }
        }
    }

    /// Gives a reservation's room back.
    pub fn cancel(&mut self, r: Reservation) -> Result<(), StoreError> {
        self.check_mine(r.store)?;
        self.reservations -= 1;
        self.host.free(&r.handle)
    }

    /// Refuses what another store handed out (its handles would pass this store's checks).
    pub(super) fn check_mine(&self, store: u64) -> Result<(), StoreError> {
        if store != self.instance {
            return Err(StoreError::InvalidHandle {
                tier: Tier::Host,
                reason: format!(
                    "handed out by store instance {store}, given to instance {}",
                    self.instance
                ),
            });
        }
        Ok(())
    }
}
