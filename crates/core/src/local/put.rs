//! [`PutSession`]: a put received straight into a store reservation (no intermediate copy)
//! and hashed while it arrives, then sealed in place.
//!
//! Only the reservation and the seal's dedup decision take the lock; the body's pieces are
//! copied (and hashed) into the reservation without it, and a byte comparison with equal-id
//! blocks runs on pinned views outside it too. The session owns the reservation until it is
//! sealed; dropping it unsealed (a bad body, a timeout, a client that went away mid-body and
//! took the request future with it) cancels the reservation, so arena room is never leaked.

use std::sync::Arc;

use kvfabric_store::{
    BlockHeader, BlockId, ByteCount, Dedup, Filling, ModelGeometry, NamespaceKey, Prepared,
    PutForm, Reservation, SealStep, Sealed as StoreSealed, StoreError, Tier, VerifiedBlock,
};

use super::room::Want;
use super::{block_in_place, Local, LocalError, LocalNode};
use crate::events::{BlockInfo, EngineBlock, EventKind};
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
    filling: Option<Filling>,
}

impl<'a> PutSession<'a> {
    /// Reserves host-arena room for one block of `geometry` under `ns` (making room, or
    /// waiting for it a bounded time; see [`super::room`]).
    pub(crate) async fn begin(
        node: &'a LocalNode,
        ns: NamespaceKey,
        geometry: &ModelGeometry,
        form: PutForm,
    ) -> Result<PutSession<'a>, LocalError> {
        let reservation = node.reserve(Want::Block(geometry)).await?;
        match reservation.fill(&ns, geometry, form) {
            Ok(filling) => Ok(PutSession {
                node,
                filling: Some(filling),
            }),
            Err(u) => {
                node.cancel(u.reservation);
                Err(u.error.into())
            }
        }
    }

    fn filling(&mut self) -> &mut Filling {
        self.filling
            .as_mut()
            .expect("a session holds its reservation until sealed")
    }

    /// Bytes received so far.
    pub(crate) fn written(&self) -> u64 {
        self.filling.as_ref().map_or(0, Filling::written)
    }

    /// Copies (and hashes) the next piece of the body into the reservation, without the lock.
    /// Refuses a piece that would run past the payload length, leaving the session as it was.
    pub(crate) fn write(&mut self, piece: &[u8]) -> Result<(), PutError> {
        let f = self.filling();
        let expected = f.expected();
        f.write(piece).map_err(|e| match e {
            StoreError::PayloadLength { found, .. } => PutError::Length { expected, found },
            e => PutError::Local(e.into()),
        })
    }

    /// Seals the filled reservation, holds the block (one reference per slot, the spare one
    /// of a dedup onto a held slot given back) and records each of `chunk_keys` (a prefix key,
    /// a position-independent key) for it, and `info` for its events (when it was not held
    /// already).
    pub(crate) fn seal(
        mut self,
        chunk_keys: &[ChunkKey],
        info: BlockInfo,
    ) -> Result<Sealed, PutError> {
        let f = self.filling.take().expect("a session is sealed once");
        let (expected, written) = (f.expected(), f.written());
        let prepared = match f.finish() {
            Ok(p) => p,
            Err(u) => {
                self.node.cancel(u.reservation);
                return Err(match u.error {
                    StoreError::PayloadLength { .. } => PutError::Length {
                        expected,
                        found: written,
                    },
                    e => PutError::Local(e.into()),
                });
            }
        };
        let sealed = self
            .node
            .seal_prepared(prepared, |l, s, ns| l.adopt(s, ns, chunk_keys, info))?;
        Ok(sealed)
    }
}

impl Drop for PutSession<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.filling.take() {
            self.node.cancel(f.into_reservation());
        }
    }
}

impl LocalNode {
    /// Gives a reservation back. A plain lock: freeing arena room is cheap, and a future
    /// dropped while the runtime shuts down must not reach for `block_in_place`.
    pub(crate) fn cancel(&self, r: Reservation) {
        let cancelled = self
            .lock()
            .and_then(|mut l| l.store.cancel(r).map_err(LocalError::from));
        self.room.notify_waiters();
        if let Err(e) = cancelled {
            tracing::error!(error = %e, "cancelling a put's reservation failed");
        }
    }

    /// Seals a prepared block: the dedup decision under the lock, a byte comparison with
    /// equal-id blocks outside it, then `adopt` (under the lock, with the store's seal).
    pub(crate) fn seal_prepared<R>(
        &self,
        prepared: Prepared,
        adopt: impl FnOnce(&mut Local, StoreSealed, NamespaceKey) -> Result<R, LocalError>,
    ) -> Result<R, LocalError> {
        let ns = prepared.namespace();
        let mut adopt = Some(adopt);
        let step = self.with_seal(|l| match l.store.seal_prepared(prepared)? {
            SealStep::Sealed(s) => {
                let adopt = adopt.take().expect("adopted once");
                adopt(l, s, ns).map(Ok)
            }
            SealStep::Compare(c) => Ok(Err(c)),
        });
        self.room.notify_waiters();
        let mut c = match step? {
            Ok(done) => return Ok(done),
            Err(c) => c,
        };
        if c.reads_disk() {
            block_in_place(|| c.run());
        } else {
            c.run();
        }
        let adopt = adopt.take().expect("adopted once");
        let done = self.with_seal(|l| {
            let s = l.store.seal_compared(c)?;
            adopt(l, s, ns)
        });
        self.room.notify_waiters();
        done
    }

    /// Installs a block that arrived verified from a peer and holds it (a block already held
    /// gives back the spare reference); returns the tier it sits in. With a GPU tier the block
    /// is placed there by the store (under the lock); otherwise it is copied into a host
    /// reservation outside the lock.
    pub async fn install(&self, block: &VerifiedBlock) -> Result<Tier, LocalError> {
        self.install_with(block, None).await
    }

    /// [`LocalNode::install`] with the engine identity the peer had for it (checked against
    /// the block's token count; one that does not fit is dropped): its `Stored` event carries
    /// the block's token count (from its header) and that identity.
    pub async fn install_with(
        &self,
        block: &VerifiedBlock,
        engine: Option<Arc<EngineBlock>>,
    ) -> Result<Tier, LocalError> {
        let tokens = BlockHeader::decode(block.bytes()).map_or(0, |h| h.tokens);
        let mut info = BlockInfo {
            block_tokens: tokens,
            engine,
        };
        if info.check().is_err() {
            info.engine = None;
        }
        if self.with(|l| Ok(l.store.tiers()[0] == Tier::Gpu))? {
            return self.with_io(|l| {
                let s = l.store.install(block)?;
                l.adopt_install(s, block.namespace(), info)
            });
        }
        let len = ByteCount(block.bytes().len() as u64);
        let r = self.reserve(Want::Bytes(len)).await?;
        let prepared = match Prepared::verified(r, block) {
            Ok(p) => p,
            Err(u) => {
                self.cancel(u.reservation);
                return Err(u.error.into());
            }
        };
        self.seal_prepared(prepared, |l, s, ns| l.adopt_install(s, ns, info))
    }
}

impl Local {
    /// Holds a sealed put and records its chunk keys; publishes it if new here.
    fn adopt(
        &mut self,
        s: StoreSealed,
        ns: NamespaceKey,
        chunk_keys: &[ChunkKey],
        info: BlockInfo,
    ) -> Result<Sealed, LocalError> {
        let newly = !self.held.contains(&ns, &s.id);
        // A new block is placed by the GPU policy before it is announced; a block held
        // already stays where it is.
        let tier = if newly {
            self.store.place_put(s.slot)?
        } else {
            self.store.handle(s.slot)?.tier
        };
        if !self.held.insert(ns, s.id, s.slot) {
            self.store.release(s.slot)?;
        }
        let variant = self
            .held
            .slots(&ns, &s.id)
            .and_then(|slots| slots.iter().position(|x| *x == s.slot))
            .unwrap_or(0) as u32;
        // A key names a block by id, which reads as variant 0: a later variant's keys would
        // hand out other bytes, so they are not recorded.
        if variant == 0 {
            for k in chunk_keys {
                self.chunks.record(&mut self.held, ns, *k, s.id);
            }
        }
        if newly {
            self.set_info(ns, s.id, info);
            self.emit(EventKind::Stored {
                namespace: ns,
                tier,
                ids: vec![s.id],
                chunk_key: chunk_keys.first().copied(),
                info: self.info_of(&ns, &s.id),
            });
        }
        Ok(Sealed {
            id: s.id,
            dedup: s.dedup,
            bytes: s.bytes,
            tier,
            variant,
        })
    }

    /// Holds an installed block; publishes it if new here.
    fn adopt_install(
        &mut self,
        s: StoreSealed,
        ns: NamespaceKey,
        info: BlockInfo,
    ) -> Result<Tier, LocalError> {
        let tier = self.store.handle(s.slot)?.tier;
        let newly = !self.held.contains(&ns, &s.id);
        if !self.held.insert(ns, s.id, s.slot) {
            self.store.release(s.slot)?;
        }
        if newly {
            self.set_info(ns, s.id, info);
            self.emit(EventKind::Stored {
                namespace: ns,
                tier,
                ids: vec![s.id],
                chunk_key: None,
                info: self.info_of(&ns, &s.id),
            });
        }
        Ok(tier)
    }
}
