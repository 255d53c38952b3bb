//! The tiered local store: sealing with byte-verified dedup, references, pins, copy-on-write,
//! and placement across GPU → host → disk.
//!
//! Every stored block instance is a *slot* with a [`SlotId`] that is never reused. A content
//! id normally maps to one slot; a second slot appears under the same id only when different
//! bytes hash to it (a collision, counted in `dedup_collisions`). Rules the store keeps:
//! - a slot with references (`refs > 0`) is never dropped (it may move to a slower tier);
//! - a pinned slot (`pins > 0`) never moves and is never dropped;
//! - no tier ever exceeds its capacity; a slot lives in exactly one tier at a time;
//! - bytes read back from disk or GPU are verified against the id before they are served.
//!
//! Blocks recovered from disk on open come back with one reference held on behalf of the node
//! (they were acknowledged before the restart); the node releases what it no longer wants.

mod counters;
mod draft;
mod fill_hasher;
mod moves;
mod pinned;
mod placement;
mod read;
mod refs;
mod reserve;
mod room;
mod seal;
mod seal_split;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::StoreError;
use crate::eviction::s3fifo::S3Fifo;
use crate::handle::{Handle, Tier};
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};
use crate::tier::disk::{DiskConfig, DiskTier};
use crate::tier::host::{HostTier, REGION_BYTES_DEFAULT};
use crate::tier::TierBackend;
use crate::units::ByteCount;

pub use counters::StoreCounters;
pub use draft::Draft;
pub use moves::TierMove;
pub use pinned::{DiskRead, GpuRead, PinnedRead, ReadStep};
pub use reserve::{Filling, Prepared, PutHashing, Reservation, Unprepared};
pub use room::{Demotion, Promotion, RoomStep};
pub use seal::{Dedup, PutForm, Sealed};
pub use seal_split::{Comparison, SealStep};

/// Identity of one stored block instance. Monotonic, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u64);

/// Ghost entries remembered per tier by the eviction policy.
const GHOST_MAX: usize = 4096;

/// A GPU tier to open (needs the `cuda` feature and a device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuConfig {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// Device bytes the tier may use.
    pub capacity: ByteCount,
    /// Which blocks the tier takes besides those fetched from peers.
    pub policy: GpuPolicy,
}

/// Which blocks go to the GPU tier. A block fetched from a peer always starts there (when it
/// has room); these say what else does. Both hold only where room can be made on the device
/// without dropping a referenced block (GPU victims move down to host, host ones to disk);
/// otherwise the block stays where it is. Every read-back from the device is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuPolicy {
    /// A node's own put moves to the device once sealed in host memory ([`Store::place_put`];
    /// the node announces it in the tier it ends in).
    pub puts: bool,
    /// A hit on a host block moves it to the device, and the read is served from there
    /// (a disk hit moves to host first: one tier per hit).
    pub promote: bool,
}

impl Default for GpuPolicy {
    /// Both: a node with a GPU tier uses it for everything it holds, fastest tier first.
    fn default() -> GpuPolicy {
        GpuPolicy {
            puts: true,
            promote: true,
        }
    }
}

/// How a store is laid out.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// GPU tier, if any. Opening fails with [`StoreError::TierUnavailable`] (and the reason)
    /// when one is asked for and cannot run here.
    pub gpu: Option<GpuConfig>,
    /// Host arena capacity.
    pub host_capacity: ByteCount,
    /// Host arena region size.
    pub host_region_bytes: u64,
    /// Disk tier, if any.
    pub disk: Option<DiskConfig>,
}

impl StoreConfig {
    /// A host-only store of `host_capacity` bytes.
    pub fn host_only(host_capacity: ByteCount) -> StoreConfig {
        StoreConfig {
            gpu: None,
            host_capacity,
            host_region_bytes: REGION_BYTES_DEFAULT,
            disk: None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) id: BlockId,
    pub(crate) namespace: NamespaceKey,
    pub(crate) handle: Handle,
    pub(crate) refs: u32,
    /// Pins, those of reads in progress ([`PinnedRead`], [`DiskRead`]) included.
    pub(crate) pins: u32,
    /// Pins held by reads in progress; only the read's own value removes one.
    pub(crate) reads: u32,
}

/// Capacity and use of one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierUsage {
    /// The tier.
    pub tier: Tier,
    /// Bytes it may hold.
    pub capacity: ByteCount,
    /// Bytes held by live blocks.
    pub used: ByteCount,
    /// Blocks it holds.
    pub blocks: u64,
}

/// Store instances opened in this process: what a reservation or a pinned read carries, so
/// that one store never takes another's (their handles would pass each other's checks).
static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// The tiered store of one node.
///
/// Its methods take `&mut self`: an owner shared between threads keeps it behind a lock, and
/// does the byte work of puts, reads and tier moves outside that lock through the split
/// operations ([`Reservation`], [`SealStep`], [`ReadStep`], [`RoomStep`]).
pub struct Store {
    hasher: Arc<dyn IdHasher>,
    /// This instance (see [`INSTANCES`]).
    instance: u64,
    /// Reservations handed out and not yet sealed or cancelled.
    reservations: u64,
    /// Demotions handed out and not yet finished.
    demotions: u64,
    gpu: Option<Box<dyn TierBackend>>,
    /// What goes to the GPU tier (default when there is none).
    gpu_policy: GpuPolicy,
    host: HostTier,
    disk: Option<DiskTier>,
    /// One policy per present tier, indexed by [`tier_index`].
    policies: [Option<S3Fifo>; 3],
    slots: HashMap<SlotId, Slot>,
    /// Keyed by namespace and id, so another tenant's id is the same single miss as an
    /// absent one (no extra work that timing could reveal).
    by_id: HashMap<(NamespaceKey, BlockId), Vec<SlotId>>,
    next_slot: u64,
    counters: StoreCounters,
    /// Tier moves recorded for the owner (`None`: not recording; see [`Store::record_moves`]).
    moves: Option<Vec<TierMove>>,
}

#[cfg(feature = "cuda")]
fn open_gpu(g: GpuConfig) -> Result<Box<dyn TierBackend>, StoreError> {
    let tier = crate::tier::gpu::open(
        g.ordinal,
        g.capacity,
        crate::tier::gpu::REGION_BYTES_DEFAULT,
    )?;
    Ok(Box::new(tier))
}

#[cfg(not(feature = "cuda"))]
fn open_gpu(_: GpuConfig) -> Result<Box<dyn TierBackend>, StoreError> {
    let reason = match crate::tier::gpu_probe::probe() {
        crate::tier::gpu_probe::GpuProbe::Unavailable { reason } => reason,
        crate::tier::gpu_probe::GpuProbe::Available { .. } => {
            "built without the `cuda` feature".into()
        }
    };
    Err(StoreError::TierUnavailable {
        tier: Tier::Gpu,
        reason,
    })
}

pub(crate) const fn tier_index(t: Tier) -> usize {
    match t {
        Tier::Gpu => 0,
        Tier::Host => 1,
        Tier::Disk => 2,
    }
}

const TIERS: [Tier; 3] = [Tier::Gpu, Tier::Host, Tier::Disk];

impl Store {
    /// Opens a store; with a disk tier, every intact block on disk is recovered (with one
    /// reference held for the node) and corrupt or torn entries are quarantined.
    pub fn open(config: StoreConfig) -> Result<Store, StoreError> {
        let gpu = match config.gpu {
            None => None,
            Some(g) => Some(open_gpu(g)?),
        };
        Store::open_with(config, Box::new(Blake3Ids), gpu)
    }

    /// Opens a store with a given id hasher and an optional GPU tier (tests plant collisions
    /// with a weak hasher, or put the device tier over host memory; production uses
    /// [`Store::open`]). The GPU policy is `config.gpu`'s (the default when absent).
    pub fn open_with(
        config: StoreConfig,
        hasher: Box<dyn IdHasher>,
        gpu: Option<Box<dyn TierBackend>>,
    ) -> Result<Store, StoreError> {
        let host = HostTier::new(config.host_capacity, config.host_region_bytes);
        let (disk, recovered) = match config.disk {
            Some(d) => {
                let (tier, rec) = DiskTier::open(d)?;
                (Some(tier), rec)
            }
            None => (None, Vec::new()),
        };
        let policy = |cap: ByteCount| Some(S3Fifo::new(cap.0, GHOST_MAX));
        let policies = [
            gpu.as_ref().and_then(|g| policy(g.capacity())),
            policy(host.capacity()),
            disk.as_ref().and_then(|d| policy(d.capacity())),
        ];
        let mut store = Store {
            hasher: Arc::from(hasher),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            reservations: 0,
            demotions: 0,
            gpu,
            gpu_policy: config.gpu.map(|g| g.policy).unwrap_or_default(),
            host,
            disk,
            policies,
            slots: HashMap::new(),
            by_id: HashMap::new(),
            next_slot: 1,
            counters: StoreCounters::default(),
            moves: None,
        };
        for entry in recovered {
            store.add_slot(entry.id, entry.namespace, entry.handle, 1);
            store.counters.recovered += 1;
        }
        Ok(store)
    }

    pub(crate) fn tier_mut(&mut self, t: Tier) -> Option<&mut (dyn TierBackend + 'static)> {
        match t {
            Tier::Gpu => self.gpu.as_deref_mut(),
            Tier::Host => Some(&mut self.host),
            Tier::Disk => self.disk.as_mut().map(|d| d as &mut dyn TierBackend),
        }
    }

    pub(crate) fn tier_ref(&self, t: Tier) -> Option<&dyn TierBackend> {
        match t {
            Tier::Gpu => self.gpu.as_deref(),
            Tier::Host => Some(&self.host),
            Tier::Disk => self.disk.as_ref().map(|d| d as &dyn TierBackend),
        }
    }

    /// Tiers present, fastest first.
    pub fn tiers(&self) -> Vec<Tier> {
        TIERS
            .into_iter()
            .filter(|&t| self.tier_ref(t).is_some())
            .collect()
    }

    fn add_slot(
        &mut self,
        id: BlockId,
        namespace: NamespaceKey,
        handle: Handle,
        refs: u32,
    ) -> SlotId {
        let slot = SlotId(self.next_slot);
        self.next_slot += 1;
        self.slots.insert(
            slot,
            Slot {
                id,
                namespace,
                handle,
                refs,
                pins: 0,
                reads: 0,
            },
        );
        self.by_id.entry((namespace, id)).or_default().push(slot);
        if let Some(p) = &mut self.policies[tier_index(handle.tier)] {
            p.insert(slot, handle.len.0);
        }
        slot
    }

    /// Forgets a slot entirely (its bytes must already be freed).
    fn remove_slot(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.remove(&slot) {
            if let Some(p) = &mut self.policies[tier_index(s.handle.tier)] {
                p.remove(slot);
            }
            let key = (s.namespace, s.id);
            if let Some(v) = self.by_id.get_mut(&key) {
                v.retain(|x| *x != slot);
                if v.is_empty() {
                    self.by_id.remove(&key);
                }
            }
        }
    }

    /// The live slots holding `id` in `namespace`, oldest first.
    pub fn slots_of(&self, id: &BlockId, namespace: &NamespaceKey) -> Vec<SlotId> {
        self.by_id
            .get(&(*namespace, *id))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether `id` is stored for `namespace`.
    pub fn contains(&self, id: &BlockId, namespace: &NamespaceKey) -> bool {
        !self.slots_of(id, namespace).is_empty()
    }

    /// The handle of a slot (where its bytes live now).
    pub fn handle(&self, slot: SlotId) -> Result<Handle, StoreError> {
        Ok(self.slot(slot)?.handle)
    }

    /// References and pins of a slot.
    pub fn counts(&self, slot: SlotId) -> Result<(u32, u32), StoreError> {
        let s = self.slot(slot)?;
        Ok((s.refs, s.pins))
    }

    /// The namespace a slot was sealed in.
    pub fn namespace_of(&self, slot: SlotId) -> Result<NamespaceKey, StoreError> {
        Ok(self.slot(slot)?.namespace)
    }

    /// The content id of a slot.
    pub fn id_of(&self, slot: SlotId) -> Result<BlockId, StoreError> {
        Ok(self.slot(slot)?.id)
    }

    pub(crate) fn slot(&self, slot: SlotId) -> Result<&Slot, StoreError> {
        self.slots.get(&slot).ok_or(StoreError::StaleSlot(slot.0))
    }

    pub(crate) fn slot_mut(&mut self, slot: SlotId) -> Result<&mut Slot, StoreError> {
        self.slots
            .get_mut(&slot)
            .ok_or(StoreError::StaleSlot(slot.0))
    }

    /// Every live slot with its handle, for invariant checks and the node's status.
    pub fn live_slots(&self) -> Vec<(SlotId, BlockId, Handle)> {
        let mut v: Vec<_> = self
            .slots
            .iter()
            .map(|(s, x)| (*s, x.id, x.handle))
            .collect();
        v.sort_unstable_by_key(|x| x.0);
        v
    }

    /// Capacity and use per tier.
    pub fn usage(&self) -> Vec<TierUsage> {
        self.tiers()
            .into_iter()
            .map(|t| {
                let b = self.tier_ref(t).expect("present");
                TierUsage {
                    tier: t,
                    capacity: b.capacity(),
                    used: b.used(),
                    blocks: self.slots.values().filter(|s| s.handle.tier == t).count() as u64,
                }
            })
            .collect()
    }

    /// Counters since open.
    pub fn counters(&self) -> StoreCounters {
        let mut c = self.counters.clone();
        if let Some(d) = &self.disk {
            c.disk = d.counters();
        }
        c
    }

    /// Number of live slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}
