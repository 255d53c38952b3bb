//! KV events: one [`EventLog`] per node, fed by the local side (`crate::local`) whenever what
//! the node holds changes, read by `GET /v1/events` (Server-Sent Events, in the node crate)
//! and by the node's optional ZeroMQ sockets, in vLLM 0.33.0's wire ([`wire`]).
//!
//! The log is a bounded ring of [`Batch`]es with gap-free sequence numbers (0, 1, 2, … within
//! one epoch), a broadcast to live subscribers, and the node's epoch ([`epoch`]): a counter
//! persisted in `data_dir` that grows on every start. Sequence numbers restart at 0 with each
//! epoch (as a restarted vLLM engine's do); the first batch of an epoch (seq 0) announces it:
//! an [`EventKind::Epoch`] (`AllBlocksCleared` on the ZeroMQ wire) followed by
//! [`EventKind::Stored`] events for the blocks recovered from disk, so a consumer that drops
//! its state for the node on that batch ends up with the node's state.
//! On a cluster node, [`node_down`] adds an [`EventKind::NodeDown`] when a member's lease
//! expires in the directory.
//!
//! What a block is published under ([`engine`]): the engine identity its put carried (page
//! hashes, parent, token ids, LoRA, group), else a hash of its id; always its token count.
//! [`cluster`] is the cluster feed (every member's batches in one stream), filled by the
//! control-channel polls of [`poll`].

pub mod cluster;
pub mod engine;
pub mod epoch;
mod metrics;
pub mod node_down;
pub mod poll;
pub mod views;
pub mod wire;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kvfabric_store::{BlockId, NamespaceKey, Tier};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

pub use engine::{BlockInfo, EngineBlock, EngineHash};
pub use metrics::EventMetrics;

use crate::ids::{ChunkKey, NodeId};

/// Most batches the live broadcast holds for a slow subscriber (beyond: it refills from the
/// ring).
pub const BROADCAST_MAX: usize = 1024;

/// What one event says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The node started a new epoch: whatever a consumer knew of it is void.
    Epoch,
    /// Blocks now held in `namespace`, in `tier`.
    Stored {
        /// The namespace they are held in (decides which tenants see the event).
        namespace: NamespaceKey,
        /// Where they sit.
        tier: Tier,
        /// Their ids (exactly one when `info` carries an engine record).
        ids: Vec<BlockId>,
        /// The first chunk key the put named (its prefix key when it gave one), if any.
        chunk_key: Option<ChunkKey>,
        /// Their token count and, for one block put by an engine, its engine identity.
        info: BlockInfo,
    },
    /// Blocks no longer held in `namespace` (on `tier` when known).
    Removed {
        /// The namespace they were held in.
        namespace: NamespaceKey,
        /// Where they sat (`None`: their slots were already gone, e.g. quarantined).
        tier: Option<Tier>,
        /// Their ids (exactly one when `engine` is set).
        ids: Vec<BlockId>,
        /// The engine identity the block was published under, so the removal names the
        /// same hashes as the store did.
        engine: Option<Arc<EngineBlock>>,
    },
    /// A member's lease expired in the directory: its ownership records were purged
    /// ([`node_down`]). On the ZeroMQ wire of the member's own stream (the cluster feed,
    /// [`cluster`]) it is an `AllBlocksCleared`; on any other node's stream it has no event.
    NodeDown {
        /// The member.
        node: NodeId,
        /// Its directory epoch (incarnation) that ended.
        epoch: u64,
    },
}

impl EventKind {
    /// The namespace a tenant must be able to read to see this event; `None`: every caller.
    pub fn namespace(&self) -> Option<&NamespaceKey> {
        match self {
            EventKind::Epoch | EventKind::NodeDown { .. } => None,
            EventKind::Stored { namespace, .. } | EventKind::Removed { namespace, .. } => {
                Some(namespace)
            }
        }
    }
}

/// One published batch: what one change of the node's holdings produced.
#[derive(Debug)]
pub struct Batch {
    /// Sequence number within the epoch, from 0, without gaps.
    pub seq: u64,
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Seconds since the Unix epoch when it was published.
    pub ts: f64,
    /// Its events, in order.
    pub events: Vec<EventKind>,
    /// The vLLM `KVEventBatch` msgpack encoding ([`wire::encode_batch`]).
    pub payload: Bytes,
    /// Who sees it ([`views`]): `None` every reader, else the readers of this namespace.
    pub class: views::Class,
    /// The batches of each class the publishing log had published up to and including this
    /// one ([`views::ClassCounts`]); empty for a batch received from another member (the
    /// cluster feed counts its own, [`cluster::FeedEntry`]).
    pub counts: Arc<views::ClassCounts>,
}

impl Batch {
    /// A batch with its class from its events (a mixed one, which only an older member
    /// publishes, is everyone's) and no counts.
    pub fn new(seq: u64, epoch: u64, ts: f64, events: Vec<EventKind>, payload: Bytes) -> Batch {
        Batch {
            seq,
            epoch,
            ts,
            class: views::class_of(&events).unwrap_or(None),
            events,
            payload,
            counts: Default::default(),
        }
    }

    /// Its position in the view of a reader of `read` ([`views::view_seq`]); `None` when that
    /// reader does not see it.
    pub fn view_seq(&self, read: &[NamespaceKey]) -> Option<u64> {
        views::view_seq(&self.class, &self.counts, read)
    }
}

/// The ring, the next sequence number, and the batches published by class.
struct Ring {
    batches: VecDeque<Arc<Batch>>,
    next_seq: u64,
    counts: views::ClassCounts,
}

/// Where a subscriber starts: what is still in the ring from its start, then live batches.
pub struct Subscription {
    /// The sequence number of the first batch this subscriber gets: `since`, or for a live
    /// subscription the next one to be published.
    pub next: u64,
    /// Buffered batches with `seq >= since`, in order.
    pub replay: Vec<Arc<Batch>>,
    /// Batches published after the snapshot.
    pub live: broadcast::Receiver<Arc<Batch>>,
    /// Changes to `true` when the node shuts down.
    pub closed: watch::Receiver<bool>,
}

/// Why a subscription from `since` cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayGap {
    /// The oldest sequence number still buffered (the next one to be published when the ring
    /// is empty).
    pub oldest: u64,
}

/// The event log of one node.
pub struct EventLog {
    node: NodeId,
    epoch: u64,
    capacity: usize,
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<Batch>>,
    closed: watch::Sender<bool>,
    /// Its metrics (registered in the node's registry).
    pub metrics: EventMetrics,
}

impl EventLog {
    /// A log for `node` in `epoch`, keeping the last `capacity` batches (at least 1).
    pub fn new(node: NodeId, epoch: u64, capacity: usize, metrics: EventMetrics) -> EventLog {
        let capacity = capacity.max(1);
        // A subscriber that falls behind the broadcast refills from the ring, so the
        // broadcast need not be as long as the ring.
        let (tx, _) = broadcast::channel(capacity.min(BROADCAST_MAX));
        let (closed, _) = watch::channel(false);
        EventLog {
            node,
            epoch,
            capacity,
            ring: Mutex::new(Ring {
                batches: VecDeque::with_capacity(capacity.min(4096)),
                next_seq: 0,
                counts: Default::default(),
            }),
            tx,
            closed,
            metrics,
        }
    }

    /// The node the log belongs to.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The node's current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Publishes `events` (nothing when empty) as one batch, or as one batch per namespace
    /// when they are of several namespaces and none is everyone's ([`views::split`]); returns
    /// the sequence number of the last.
    pub fn publish(&self, events: Vec<EventKind>) -> Option<u64> {
        if events.is_empty() {
            return None;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = None;
        for events in views::split(events) {
            let payload = wire::encode_batch(ts, &events, self.node);
            let seq = ring.next_seq;
            ring.next_seq += 1;
            let mut batch = Batch::new(seq, self.epoch, ts, events, payload);
            ring.counts.add(batch.class);
            batch.counts = Arc::new(ring.counts.clone());
            let batch = Arc::new(batch);
            if ring.batches.len() == self.capacity {
                ring.batches.pop_front();
            }
            ring.batches.push_back(batch.clone());
            // Sent under the ring lock so that live order is publication order; no receiver
            // is not an error.
            let _ = self.tx.send(batch);
            self.metrics.published.inc();
            last = Some(seq);
        }
        last
    }

    /// [`EventLog::subscribe`] for a reader of `read` resuming from position `since` of its
    /// view ([`views`]): the subscription starts at the first batch it sees at or after that
    /// position; [`ReplayGap`] names the oldest view position still buffered.
    pub fn subscribe_view(
        &self,
        read: &[NamespaceKey],
        since: Option<u64>,
    ) -> Result<Subscription, ReplayGap> {
        let Some(since) = since else {
            return self.subscribe(None);
        };
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let entries = ring.batches.iter().map(|b| (b.seq, &b.class, &*b.counts));
        let start = views::view_start(entries, &ring.counts, read, since)?;
        let from = start.unwrap_or(ring.next_seq);
        Ok(self.subscribe_in(&ring, Some(from)))
    }

    /// Subscribes from sequence number `since` of the current epoch (`None`: live batches
    /// only). [`ReplayGap`] when `since` is older than the oldest buffered batch.
    pub fn subscribe(&self, since: Option<u64>) -> Result<Subscription, ReplayGap> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = ring.batches.front().map_or(ring.next_seq, |b| b.seq);
        match since {
            Some(s) if s < oldest => Err(ReplayGap { oldest }),
            _ => Ok(self.subscribe_in(&ring, since)),
        }
    }

    /// A subscription from `since` (at or after the oldest buffered batch), under the ring
    /// lock so that no batch falls between the replay and the live receiver.
    fn subscribe_in(&self, ring: &Ring, since: Option<u64>) -> Subscription {
        let replay = match since {
            None => Vec::new(),
            Some(s) => ring
                .batches
                .iter()
                .filter(|b| b.seq >= s)
                .cloned()
                .collect(),
        };
        Subscription {
            next: since.unwrap_or(ring.next_seq),
            replay,
            live: self.tx.subscribe(),
            closed: self.closed.subscribe(),
        }
    }

    /// Buffered batches with `seq >= since` (the ZeroMQ replay and a lagging publisher).
    pub fn buffered_from(&self, since: u64) -> Vec<Arc<Batch>> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.batches
            .iter()
            .filter(|b| b.seq >= since)
            .cloned()
            .collect()
    }

    /// The oldest position of the view of a reader of `read` still buffered
    /// ([`views::oldest_view`]).
    pub fn oldest_view(&self, read: &[NamespaceKey]) -> u64 {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let first = ring.batches.front().map(|b| (&b.class, &*b.counts));
        views::oldest_view(first, &ring.counts, read)
    }

    /// The next sequence number to be published.
    pub fn next_seq(&self) -> u64 {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).next_seq
    }

    /// Changes to `true` when the log closes (for tasks that only need to know when to stop).
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Ends every subscription (at shutdown).
    pub fn close(&self) {
        let _ = self.closed.send(true);
    }
}

#[cfg(test)]
mod tests;
