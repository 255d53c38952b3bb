//! [`PutSession`]: a put received straight into a store reservation (no intermediate copy),
//! then sealed in place.
//!
//! The session owns the reservation until it is sealed; dropping it unsealed (a bad body, a
//! timeout, a client that went away mid-body and took the request future with it) cancels the
//! reservation, so arena room is never leaked.

use kvfabric_store::{
    BlockId, ByteCount, Dedup, ModelGeometry, NamespaceKey, PutForm, Reservation, Tier,
};

use super::{LocalError, LocalNode};
use crate::events::{BlockInfo, EventKind};
use crate::ids::ChunkKey;

/// Why a put's body was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PutError {
    /// The body does not have the geometry's payload length.
    #[error("payload length: expected {expected} bytes, found {found}")]
    Length {
        /// The geometry's payload length.
        expected: u64,
        /// Bytes received (at least this many when the body ran past `expected`).
        found: u64,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Local(#[from] LocalError),
}

/// A sealed put, as the API reports it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sealed {
    /// Content id.
    pub(crate) id: BlockId,
    /// What dedup decided.
    pub(crate) dedup: Dedup,
    /// Stored bytes (header + payload).
    pub(crate) bytes: ByteCount,
    /// The tier it landed in.
    pub(crate) tier: Tier,
    /// Which of the blocks held under its id it is, in the order they were sealed: 0, unless
    /// a dedup collision (same id, other bytes) made this one another block.
    pub(crate) variant: u32,
}

/// One put in progress.
pub(crate) struct PutSession<'a> {
    node: &'a LocalNode,
    reservation: Option<Reservation>,
    expected: u64,
    written: u64,
}

impl<'a> PutSession<'a> {
    /// Reserves host-arena room for one block of `geometry`.
    pub(crate) fn begin(
        node: &'a LocalNode,
        geometry: &ModelGeometry,
        payload_len: u64,
    ) -> Result<PutSession<'a>, LocalError> {
        let reservation = node.with(|l| Ok(l.store.reserve(geometry)?))?;
        Ok(PutSession {
            node,
            reservation: Some(reservation),
            expected: payload_len,
            written: 0,
        })
    }

    /// Bytes received so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Copies the next piece of the body into the reservation. Refuses a piece that would run
    /// past the payload length, leaving the session as it was.
    pub(crate) fn write(&mut self, piece: &[u8]) -> Result<(), PutError> {
        let end = self.written + piece.len() as u64;
        if end > self.expected {
            return Err(PutError::Length {
                expected: self.expected,
                found: end,
            });
        }
        let r = self
            .reservation
            .as_ref()
            .expect("a session holds its reservation until sealed");
        let at = self.written as usize..end as usize;
        self.node.with(|l| {
            l.store.reservation_payload(r)?[at].copy_from_slice(piece);
            Ok(())
        })?;
        self.written = end;
        Ok(())
    }

    /// Seals the filled reservation under `ns`, holds the block (one reference per slot, the
    /// spare one of a dedup onto a held slot given back) and records each of `chunk_keys`
    /// (a prefix key, a position-independent key) for it, and `info` for its events (when it
    /// was not held already).
    pub(crate) fn seal(
        mut self,
        ns: NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
        chunk_keys: &[ChunkKey],
        info: BlockInfo,
    ) -> Result<Sealed, PutError> {
        if self.written != self.expected {
            return Err(PutError::Length {
                expected: self.expected,
                found: self.written,
            });
        }
        let r = self
            .reservation
            .take()
            .expect("a session holds its reservation until sealed");
        let sealed = self.node.with(|l| {
            let s = l.store.seal_reserved(r, &ns, geometry, form)?;
            let tier = l.store.handle(s.slot)?.tier;
            let newly = !l.held.contains(&ns, &s.id);
            if !l.held.insert(ns, s.id, s.slot) {
                l.store.release(s.slot)?;
            }
            let variant = l
                .held
                .slots(&ns, &s.id)
                .and_then(|slots| slots.iter().position(|x| *x == s.slot))
                .unwrap_or(0) as u32;
            // A key names a block by id, which reads as variant 0: a later variant's keys
            // would hand out other bytes, so they are not recorded.
            if variant == 0 {
                for k in chunk_keys {
                    l.chunks.record(&mut l.held, ns, *k, s.id);
                }
            }
            if newly {
                l.set_info(ns, s.id, info);
                l.emit(EventKind::Stored {
                    namespace: ns,
                    tier,
                    ids: vec![s.id],
                    chunk_key: chunk_keys.first().copied(),
                    info: l.info_of(&ns, &s.id),
                });
            }
            Ok(Sealed {
                id: s.id,
                dedup: s.dedup,
                bytes: s.bytes,
                tier,
                variant,
            })
        })?;
        Ok(sealed)
    }
}

impl Drop for PutSession<'_> {
    fn drop(&mut self) {
        // A plain lock: freeing arena room is cheap, and a future dropped while the runtime
        // shuts down must not reach for `block_in_place`.
        if let Some(r) = self.reservation.take() {
            let cancelled = self
                .node
                .lock()
                .and_then(|mut l| l.store.cancel(r).map_err(LocalError::from));
            if let Err(e) = cancelled {
                tracing::error!(error = %e, "cancelling a put's reservation failed");
            }
        }
    }
}
