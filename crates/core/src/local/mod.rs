//! The node's local side: the tiered [`Store`] with what this node holds ([`Held`]) and the
//! chunk keys put on it ([`ChunkIndex`]), behind one lock that guards metadata only.
//!
//! [`LocalNode`] is the only way in. The lock is held for bookkeeping (maps, allocators,
//! eviction policies, counters), never across an `await`, and never for the bytes: a put's
//! body is copied and hashed into its reservation without it ([`put`]), a host block is served
//! from a pinned view without a copy and a disk block read and verified without it
//! ([`read`]), blocks move to disk and back with their writes and copies outside it
//! ([`room`]), and a dedup's byte comparison runs outside it. Requests on different blocks
//! therefore proceed in parallel on as many cores as the runtime has; what they still share
//! is the short bookkeeping step at the start and end of each. Calls that may do disk work
//! under the lock (tombstones, segment files, compaction, GPU copies) run inside
//! [`tokio::task::block_in_place`]. The block-info log's record of a newly held block (one
//! small unsynced append; its rare compaction rewrites and syncs the file) is written under the
//! lock too, so its order is the order of the changes. The cluster path wraps this type
//! (remote fetches on a local miss, ownership records on put) rather than changing it.
//!
//! Once the node's event log is attached ([`LocalNode::attach_events`]), every change of what
//! is held is published under the same lock: a block newly held (put, install), released
//! (delete) or forgotten (its slots quarantined), and a held block's tier moves (the store
//! records them; they are taken at the end of every call).

mod chunks;
mod held;
pub mod info_log;
mod put;
mod read;
mod room;
pub mod scrub;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use kvfabric_store::{
    BlockHeader, BlockId, NamespaceKey, SlotId, Store, StoreConfig, StoreCounters, StoreError,
    Tier, TierMove, TierUsage, HEADER_LEN,
};
use tokio::sync::mpsc;

pub(crate) use chunks::ChunkIndex;
pub(crate) use held::Held;
use info_log::InfoLog;
pub(crate) use put::{PutError, PutSession};
pub use read::LocalRead;
pub use room::RESERVE_WAIT_MS_DEFAULT;

use crate::events::{BlockInfo, EventKind, EventLog};
use crate::ids::ChunkKey;

/// Most block ids in one `Stored` event of an epoch's announcement (more make more events;
/// bounded so that one event fits a poll of the cluster feed, `events::poll`).
pub const ANNOUNCE_IDS_MAX: usize = 256;

/// What the local side can fail at.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store call panicked while holding the lock; the store's state is not trusted since.
    #[error("the store lock is poisoned (a store call panicked); restart the node")]
    Poisoned,
    /// The block-info log could not be opened or rewritten.
    #[error("block-info log in {dir}: {reason}")]
    InfoLog {
        /// Its directory.
        dir: String,
        /// What failed.
        reason: String,
    },
}

/// What opening found on disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovery {
    /// Blocks recovered into a configured namespace and held again.
    pub held: u64,
    /// Blocks recovered under a namespace no longer configured: released (evictable).
    pub orphaned: u64,
}

/// The outcome of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The node's reference was dropped.
    Released,
    /// The block is readable by the caller (a shared namespace) but not theirs to delete.
    Forbidden,
    /// Not held in any namespace the caller may read.
    NotFound,
}

/// A change in what this node holds that the directory must learn of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldingChange {
    /// A held block moved between tiers.
    Moved(TierMove),
    /// A held block is gone from this node without a delete: its bytes failed verification
    /// (on a read, a repair's copy or a scrub) and were quarantined. Its owner records are to
    /// be released, so that the directory stops naming this node and the block's other holders
    /// see it under-replicated and copy it again.
    Lost {
        /// Its namespace.
        namespace: NamespaceKey,
        /// The block.
        id: BlockId,
    },
}

/// A snapshot for metrics and `GET /v1/cluster`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The store's counters.
    pub counters: StoreCounters,
    /// Capacity and use per tier.
    pub usage: Vec<TierUsage>,
    /// Blocks held.
    pub held: u64,
    /// Chunk keys mapped.
    pub chunk_keys: u64,
    /// The disk scrub's passes, copies verified, their bytes, copies lost, read errors
    /// ([`scrub::ScrubCounters`]).
    pub scrub: [u64; 5],
}

/// Everything behind the lock.
pub(crate) struct Local {
    /// The tiered store.
    pub(crate) store: Store,
    /// What this node holds a reference on.
    pub(crate) held: Held,
    /// Chunk keys put on this node.
    pub(crate) chunks: ChunkIndex,
    /// The node's event log, once attached: every change of what is held is published to it
    /// under this lock, so events are in the order of the changes.
    pub(crate) events: Option<Arc<EventLog>>,
    /// Where the tier moves and losses of held blocks go besides the event log: the cluster
    /// side, which records them in the directory (set by [`LocalNode::watch_changes`]).
    pub(crate) moves: Option<mpsc::UnboundedSender<HoldingChange>>,
    /// Where what the events say of each block is kept across restarts (none: memory only).
    info_log: Option<InfoLog>,
}

/// The local side of a node.
pub struct LocalNode {
    inner: Mutex<Local>,
    /// Woken whenever host room may have come back (a reservation sealed or cancelled, a read
    /// unpinned, a demotion finished, a block released): puts waiting for room look again.
    room: tokio::sync::Notify,
    /// Bound on a put's wait for host room held by work in flight.
    reserve_wait_ms_max: u64,
    /// Whether sealing a put may copy it to the GPU tier (its locked steps then run off the
    /// async workers: [`LocalNode::with_seal`]).
    puts_reach_device: bool,
    /// Reads answered not found (no copy here, none fetched from a peer).
    not_found: std::sync::atomic::AtomicU64,
    /// What the disk scrub has done ([`scrub`]).
    scrub: scrub::ScrubCounters,
}

impl LocalNode {
    /// Opens the store and re-holds the blocks recovered from disk whose namespace is one of
    /// `namespaces` (each recovered block comes back with one reference, held for the node).
    pub fn open(
        config: StoreConfig,
        namespaces: &[NamespaceKey],
    ) -> Result<(LocalNode, Recovery), LocalError> {
        LocalNode::open_in(config, namespaces, None)
    }

    /// [`LocalNode::open`], keeping the block-info log ([`info_log`]) in `data_dir`: every
    /// recovered block gets back the info its events had (a block with no record gets its
    /// token count from its header), and the log is rewritten with exactly those.
    pub fn open_in(
        config: StoreConfig,
        namespaces: &[NamespaceKey],
        data_dir: Option<&Path>,
    ) -> Result<(LocalNode, Recovery), LocalError> {
        LocalNode::open_store(Store::open(config)?, namespaces, data_dir)
    }

    /// [`LocalNode::open_in`] over a store already opened (tests open one with the device
    /// tier over host memory: [`Store::open_with`]).
    pub fn open_store(
        mut store: Store,
        namespaces: &[NamespaceKey],
        data_dir: Option<&Path>,
    ) -> Result<(LocalNode, Recovery), LocalError> {
        let mut held = Held::default();
        let mut recovery = Recovery::default();
        for (slot, id, _) in store.live_slots() {
            let ns = store.namespace_of(slot)?;
            match namespaces.iter().find(|n| **n == ns) {
                Some(ns) => {
                    held.insert(*ns, id, slot);
                    recovery.held += 1;
                }
                None => {
                    store.release(slot)?;
                    recovery.orphaned += 1;
                }
            }
        }
        let info_error = |dir: &Path, e: std::io::Error| LocalError::InfoLog {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        };
        let (mut info_log, mut infos) = match data_dir {
            Some(dir) => {
                let (log, infos) = InfoLog::open(dir).map_err(|e| info_error(dir, e))?;
                (Some(log), infos)
            }
            None => (None, Default::default()),
        };
        let keys: Vec<(NamespaceKey, BlockId, kvfabric_store::SlotId)> = held.iter().collect();
        for (ns, id, slot) in keys {
            let info = match infos.remove(&(ns, id)) {
                Some(i) => i,
                None => BlockInfo::tokens(header_tokens(&mut store, slot)),
            };
            if let Some(b) = held.get_mut(&ns, &id) {
                b.info = Some(info);
            }
        }
        if let (Some(log), Some(dir)) = (&mut info_log, data_dir) {
            log.rewrite(held.infos()).map_err(|e| info_error(dir, e))?;
        }
        let puts_reach_device = store.puts_reach_device();
        let local = Local {
            store,
            held,
            chunks: ChunkIndex::default(),
            events: None,
            moves: None,
            info_log,
        };
        Ok((
            LocalNode {
                inner: Mutex::new(local),
                room: tokio::sync::Notify::new(),
                reserve_wait_ms_max: RESERVE_WAIT_MS_DEFAULT,
                puts_reach_device,
                not_found: Default::default(),
                scrub: Default::default(),
            },
            recovery,
        ))
    }

    /// Sets how long a put may wait for host room held by work in flight (other puts'
    /// reservations, pinned reads, demotions) before it is refused as full.
    pub fn set_reserve_wait_ms_max(&mut self, ms: u64) {
        self.reserve_wait_ms_max = ms;
    }

    /// Counts a read answered not found.
    pub(crate) fn count_not_found(&self) {
        self.not_found
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reads answered not found since the node started (no copy here, none fetched).
    pub fn reads_not_found(&self) -> u64 {
        self.not_found.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Local>, LocalError> {
        self.inner.lock().map_err(|_| LocalError::Poisoned)
    }

    /// Runs `f` under the lock: bookkeeping only, so on the async worker itself.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(&mut Local) -> Result<R, LocalError>,
    ) -> Result<R, LocalError> {
        let mut l = self.lock()?;
        let r = f(&mut l);
        l.publish_moves();
        r
    }

    /// Runs `f` under the lock off the async workers' fast path: for calls that may touch the
    /// disk or the GPU while holding it.
    pub(crate) fn with_io<R>(
        &self,
        f: impl FnOnce(&mut Local) -> Result<R, LocalError>,
    ) -> Result<R, LocalError> {
        block_in_place(|| self.with(f))
    }

    /// Runs a seal's locked step: [`LocalNode::with_io`] when it may copy the put to the GPU
    /// tier ([`kvfabric_store::GpuPolicy::puts`]), [`LocalNode::with`] otherwise.
    pub(crate) fn with_seal<R>(
        &self,
        f: impl FnOnce(&mut Local) -> Result<R, LocalError>,
    ) -> Result<R, LocalError> {
        if self.puts_reach_device {
            self.with_io(f)
        } else {
            self.with(f)
        }
    }

    /// Where `id` sits and its payload length, without reading it.
    pub fn head(
        &self,
        read: &[NamespaceKey],
        id: &BlockId,
    ) -> Result<Option<(Tier, u64)>, LocalError> {
        self.head_variant(read, id, 0)
    }

    /// [`LocalNode::head`] of the `variant`-th block held under `id` (see
    /// [`LocalNode::get_variant`]).
    pub fn head_variant(
        &self,
        read: &[NamespaceKey],
        id: &BlockId,
        variant: u32,
    ) -> Result<Option<(Tier, u64)>, LocalError> {
        self.with(|l| {
            let Some(ns) = l.find(read, id) else {
                return Ok(None);
            };
            let slot = match variant {
                0 => l.store.slots_of(id, &ns).first().copied(),
                v => l.variant_slot(read, id, v).map(|(_, s)| s),
            };
            match slot {
                Some(slot) => {
                    let h = l.store.handle(slot)?;
                    Ok(Some((h.tier, h.len.0.saturating_sub(HEADER_LEN as u64))))
                }
                None if variant == 0 => {
                    l.forget(&ns, id);
                    Ok(None)
                }
                None => Ok(None),
            }
        })
    }

    /// Drops the node's reference on `id` in `write` (and frees it if nothing else holds it).
    /// `read` decides whether a block the caller may not delete is [`Deleted::Forbidden`]
    /// (visible to them) or [`Deleted::NotFound`].
    pub fn delete(
        &self,
        write: &NamespaceKey,
        read: &[NamespaceKey],
        id: &BlockId,
    ) -> Result<Deleted, LocalError> {
        let done = self.with_io(|l| {
            if l.held.contains(write, id) {
                l.release(write, id)?;
                return Ok(Deleted::Released);
            }
            if l.find(read, id).is_some() {
                return Ok(Deleted::Forbidden);
            }
            Ok(Deleted::NotFound)
        });
        self.room.notify_waiters();
        done
    }

    /// For each key, the block it maps to in the first namespace of `read` that maps it to a
    /// held block.
    pub fn lookup(
        &self,
        read: &[NamespaceKey],
        keys: &[ChunkKey],
    ) -> Result<Vec<Option<BlockId>>, LocalError> {
        self.with(|l| {
            Ok(keys
                .iter()
                .map(|k| {
                    read.iter()
                        .find_map(|ns| l.chunks.get(ns, k).filter(|id| l.held.contains(ns, id)))
                })
                .collect())
        })
    }

    /// Every block this node holds, its namespace and the tier it sits in (for registering
    /// ownership after a start, by namespace), in a stable order.
    pub fn held_blocks(&self) -> Result<Vec<(NamespaceKey, BlockId, Tier)>, LocalError> {
        self.with(|l| {
            let mut out = Vec::with_capacity(l.held.len());
            for (ns, id, slot) in l.held.iter() {
                out.push((ns, id, l.store.handle(slot)?.tier));
            }
            out.sort_unstable_by_key(|(ns, id, _)| (id.0, ns.0));
            Ok(out)
        })
    }

    /// Every `(namespace, id)` this node holds, in a stable order (for re-replication).
    pub fn held_keys(&self) -> Result<Vec<(NamespaceKey, BlockId)>, LocalError> {
        self.with(|l| {
            let mut keys: Vec<_> = l.held.iter().map(|(ns, id, _)| (ns, id)).collect();
            keys.sort_unstable_by_key(|(ns, id)| (id.0, ns.0));
            Ok(keys)
        })
    }

    /// Attaches the event log and publishes its epoch's first batch: the epoch, then what is
    /// held now (recovered from disk), `Stored` events per namespace, tier and token count (at
    /// most [`ANNOUNCE_IDS_MAX`] ids each; a block with an engine identity gets its own).
    /// Atomic with respect to every other change, so no change is missing from or duplicated
    /// in the stream.
    pub fn attach_events(&self, log: Arc<EventLog>) -> Result<(), LocalError> {
        self.with(|l| {
            log.publish(l.announcement()?);
            l.events = Some(log);
            l.store.record_moves(true);
            Ok(())
        })
    }

    /// A member whose lease expired (directory epoch `ended`) and that joined again tells
    /// consumers what it holds: one batch saying its lease expired ([`EventKind::NodeDown`] of
    /// itself: `AllBlocksCleared` on its own ZeroMQ stream), then the announcement again (an
    /// `Epoch` event and what is held). The first batch takes the sequence number the cluster
    /// feed gave its own clear of this member, so the announcement always follows it.
    pub fn reannounce(&self, me: crate::ids::NodeId, ended: u64) -> Result<(), LocalError> {
        self.with(|l| {
            let events = l.announcement()?;
            if let Some(log) = &l.events {
                log.publish(vec![EventKind::NodeDown {
                    node: me,
                    epoch: ended,
                }]);
                log.publish(events);
            }
            Ok(())
        })
    }

    /// Starts reporting the tier moves of held blocks (demotions, promotions) on the returned
    /// channel, in the order they happen; replaces an earlier watcher.
    pub fn watch_changes(&self) -> Result<mpsc::UnboundedReceiver<HoldingChange>, LocalError> {
        self.with(|l| {
            let (tx, rx) = mpsc::unbounded_channel();
            l.moves = Some(tx);
            l.store.record_moves(true);
            Ok(rx)
        })
    }

    /// What the events say of `id` held in `ns` (for a peer that takes a copy of it).
    pub fn info(&self, ns: &NamespaceKey, id: &BlockId) -> Result<Option<BlockInfo>, LocalError> {
        self.with(|l| Ok(l.held.info(ns, id).cloned()))
    }

    /// The event log, once attached.
    pub fn event_log(&self) -> Result<Option<Arc<EventLog>>, LocalError> {
        self.with(|l| Ok(l.events.clone()))
    }

    /// Counters, tier use and index sizes.
    pub fn snapshot(&self) -> Result<Snapshot, LocalError> {
        self.with(|l| {
            Ok(Snapshot {
                counters: l.store.counters(),
                usage: l.store.usage(),
                held: l.held.len() as u64,
                chunk_keys: l.chunks.len() as u64,
                scrub: self.scrub.values(),
            })
        })
    }
}

impl Local {
    /// Publishes the tier moves of held blocks the last store call made (demotions,
    /// promotions) as one batch: each a `Removed` from the old tier and a `Stored` in the new;
    /// and hands each to the move watcher, if any.
    fn publish_moves(&mut self) {
        if self.events.is_none() && self.moves.is_none() {
            return;
        }
        let mut events = Vec::new();
        for m in self.store.take_moves() {
            if !self.held.contains(&m.namespace, &m.id) {
                continue;
            }
            if let Some(tx) = &self.moves {
                // A watcher gone (shutdown) is not an error.
                let _ = tx.send(HoldingChange::Moved(m));
            }
            let info = self.info_of(&m.namespace, &m.id);
            events.push(EventKind::Removed {
                namespace: m.namespace,
                tier: Some(m.from),
                ids: vec![m.id],
                engine: info.engine.clone(),
            });
            events.push(EventKind::Stored {
                namespace: m.namespace,
                tier: m.to,
                ids: vec![m.id],
                chunk_key: None,
                info,
            });
        }
        if let Some(log) = &self.events {
            log.publish(events);
        }
    }

    /// The epoch's first batch: an `Epoch` event and what is held.
    fn announcement(&self) -> Result<Vec<EventKind>, LocalError> {
        let l = self;
        // Blocks with an engine identity get an event each (their own hashes); the others
        // are grouped by namespace, tier and token count.
        type Group = ([u8; 32], Tier, u32);
        let mut groups: std::collections::BTreeMap<Group, Vec<BlockId>> =
            std::collections::BTreeMap::new();
        let mut engine_blocks = Vec::new();
        for (ns, id, slot) in l.held.iter() {
            let tier = l.store.handle(slot)?.tier;
            let info = l.info_of(&ns, &id);
            if info.engine.is_some() {
                engine_blocks.push((ns.0, tier, id, info));
            } else {
                groups
                    .entry((ns.0, tier, info.block_tokens))
                    .or_default()
                    .push(id);
            }
        }
        let mut events = vec![EventKind::Epoch];
        for ((ns, tier, tokens), mut ids) in groups {
            ids.sort();
            for part in ids.chunks(ANNOUNCE_IDS_MAX) {
                events.push(EventKind::Stored {
                    namespace: NamespaceKey(ns),
                    tier,
                    ids: part.to_vec(),
                    chunk_key: None,
                    info: BlockInfo::tokens(tokens),
                });
            }
        }
        engine_blocks.sort_by_key(|(ns, tier, id, _)| (*ns, *tier, *id));
        for (ns, tier, id, info) in engine_blocks {
            events.push(EventKind::Stored {
                namespace: NamespaceKey(ns),
                tier,
                ids: vec![id],
                chunk_key: None,
                info,
            });
        }
        Ok(events)
    }

    /// What the events say of a held block (a token count of 0 for one not held).
    pub(crate) fn info_of(&self, ns: &NamespaceKey, id: &BlockId) -> BlockInfo {
        self.held
            .info(ns, id)
            .cloned()
            .unwrap_or(BlockInfo::tokens(0))
    }

    /// Records what the events say of a block just held, unless it has an info already (the
    /// first wins while the block is held), in the block-info log too.
    pub(crate) fn set_info(&mut self, ns: NamespaceKey, id: BlockId, info: BlockInfo) {
        let Some(b) = self.held.get_mut(&ns, &id) else {
            return;
        };
        if b.info.is_some() {
            return;
        }
        b.info = Some(info.clone());
        let Local { held, info_log, .. } = self;
        if let Some(log) = info_log {
            if let Err(e) = log.append(&ns, &id, &info) {
                tracing::warn!(block = %id, error = %e, "block-info log: append failed");
            }
            if log.wants_compaction() {
                if let Err(e) = log.rewrite(held.infos()) {
                    tracing::warn!(error = %e, "block-info log: rewrite failed");
                }
            }
        }
    }

    /// Publishes one event as its own batch (nothing before the log is attached).
    pub(crate) fn emit(&self, event: EventKind) {
        if let Some(log) = &self.events {
            log.publish(vec![event]);
        }
    }

    /// The namespace of `read` holding `id`, probing all of them.
    fn find(&self, read: &[NamespaceKey], id: &BlockId) -> Option<NamespaceKey> {
        let mut found = None;
        for ns in read {
            if self.held.contains(ns, id) && found.is_none() {
                found = Some(*ns);
            }
        }
        found
    }

    /// The namespace of `read` holding `id` and the slot of its `variant`-th block.
    fn variant_slot(
        &self,
        read: &[NamespaceKey],
        id: &BlockId,
        variant: u32,
    ) -> Option<(NamespaceKey, SlotId)> {
        let ns = self.find(read, id)?;
        let slot = *self.held.slots(&ns, id)?.get(variant as usize)?;
        Some((ns, slot))
    }

    /// Forgets one slot of a held block whose bytes are gone from the store (quarantined);
    /// the block itself when it was the last.
    fn forget_slot(&mut self, ns: &NamespaceKey, id: &BlockId, slot: SlotId) {
        let last = match self.held.get_mut(ns, id) {
            Some(b) => {
                b.slots.retain(|s| *s != slot);
                b.slots.is_empty()
            }
            None => false,
        };
        if last {
            self.forget(ns, id);
        }
    }

    /// Drops the node's references on a held block and frees what nothing else uses.
    fn release(&mut self, ns: &NamespaceKey, id: &BlockId) -> Result<(), LocalError> {
        let Some(block) = self.held.remove(ns, id) else {
            return Ok(());
        };
        self.chunks.forget(ns, &block.chunk_keys);
        let tier = block
            .slots
            .first()
            .and_then(|s| self.store.handle(*s).ok())
            .map(|h| h.tier);
        self.emit(EventKind::Removed {
            namespace: *ns,
            tier,
            ids: vec![*id],
            engine: block.info.and_then(|i| i.engine),
        });
        for slot in block.slots {
            match self.store.release(slot) {
                Ok(_) => {
                    self.store.remove_if_unused(slot)?;
                }
                // Quarantined or dropped since: nothing left to release.
                Err(StoreError::StaleSlot(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Forgets a held block whose slots are gone from the store (quarantined): a loss the
    /// log names and the move watcher hears of ([`HoldingChange::Lost`]).
    fn forget(&mut self, ns: &NamespaceKey, id: &BlockId) {
        if let Some(block) = self.held.remove(ns, id) {
            tracing::warn!(
                block = %id,
                "lost a held copy: its bytes failed verification and were quarantined"
            );
            if let Some(tx) = &self.moves {
                let _ = tx.send(HoldingChange::Lost {
                    namespace: *ns,
                    id: *id,
                });
            }
            self.chunks.forget(ns, &block.chunk_keys);
            self.emit(EventKind::Removed {
                namespace: *ns,
                tier: None,
                ids: vec![*id],
                engine: block.info.and_then(|i| i.engine),
            });
        }
    }
}

/// The token count in the header of a held block (read from the store: only for a recovered
/// block with no block-info record); 0 when it cannot be read.
fn header_tokens(store: &mut Store, slot: kvfabric_store::SlotId) -> u32 {
    match store.read(slot) {
        Ok(block) => BlockHeader::decode(block.bytes()).map_or(0, |h| h.tokens),
        Err(e) => {
            tracing::warn!(?slot, error = %e, "reading a recovered block's header failed");
            0
        }
    }
}

/// [`tokio::task::block_in_place`] on a multi-threaded runtime; a plain call elsewhere (unit
/// tests, the current-thread runtime where it would panic).
fn block_in_place<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests;
