//! [`ClusterFeed`]: every member's KV events in one ordered stream, for routers that
//! subscribe once (the cluster ZeroMQ socket and `GET /v1/events?scope=cluster`).
//!
//! Each entry is one member's batch, unchanged: its node, its epoch, its own gap-free
//! sequence number and its payload (encoded for that member's stream, so a consumer keyed
//! by topic sees exactly what that member's own socket sends). The feed keeps, per member,
//! the epoch and the next sequence number it expects: a batch of an older epoch, or one it
//! already has, is dropped; a newer epoch starts that member's stream over (its batch 0 is
//! `AllBlocksCleared` and what it holds). Entries get a feed sequence number of their own
//! (0, 1, 2, … for the life of this node) for replaying the merged stream.
//!
//! When a member's lease expires ([`ClusterFeed::node_down`]), the feed appends, in that
//! member's stream, one batch of [`EventKind::NodeDown`] of itself (on the ZeroMQ wire an
//! `AllBlocksCleared`): a router stops ranking a member that can no longer serve. The member's
//! stream then stays ended until the member announces what it holds again: its next epoch (a
//! restart), or the re-announcement (`Epoch` first) a member publishes when it joins the
//! directory again after its lease expired (a pause: `LocalNode::reannounce`, whose first batch
//! takes the sequence number the clear took). Batches in between are dropped, so the stream
//! never contradicts the clear, and the member's sequence numbers stay increasing.
//!
//! Where the batches come from: this node's own log ([`ClusterFeed::follow`]) and the other
//! members' logs, polled over the control channel ([`super::poll`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use kvfabric_store::NamespaceKey;

use super::views::{self, ClassCounts};
use super::{wire, Batch, EventKind, EventLog, ReplayGap, BROADCAST_MAX};
use crate::ids::NodeId;

/// One member's batch in the feed.
#[derive(Debug)]
pub struct FeedEntry {
    /// The feed's sequence number (this node's, gap-free).
    pub feed_seq: u64,
    /// The member whose batch it is.
    pub node: NodeId,
    /// The batch, with that member's epoch and sequence number.
    pub batch: Arc<Batch>,
    /// The feed's entries of each class up to and including this one ([`views`]).
    pub counts: Arc<ClassCounts>,
    /// The entries of each class the feed took of this member's epoch, up to and including
    /// this one (counted from the first of that epoch the feed took).
    pub origin_counts: Arc<ClassCounts>,
}

impl FeedEntry {
    /// Its position in the feed's view of a reader of `read`; `None`: not seen by that reader.
    pub fn view_seq(&self, read: &[NamespaceKey]) -> Option<u64> {
        views::view_seq(&self.batch.class, &self.counts, read)
    }

    /// Its position in the view of a reader of `read` of the member's own stream, counted
    /// from the first batch of that epoch the feed took.
    pub fn origin_view_seq(&self, read: &[NamespaceKey]) -> Option<u64> {
        views::view_seq(&self.batch.class, &self.origin_counts, read)
    }
}

/// What the feed knows of one member's stream.
#[derive(Debug, Clone, Copy)]
struct Origin {
    epoch: u64,
    next_seq: u64,
    ended: bool,
    /// The latest directory epoch whose expiry this stream already said (the feed's clear or
    /// the member's own `NodeDown`): a later report of the same expiry is stale.
    cleared: Option<u64>,
}

struct FeedRing {
    entries: VecDeque<Arc<FeedEntry>>,
    next: u64,
    origins: HashMap<NodeId, Origin>,
    /// Entries by class.
    counts: ClassCounts,
    /// Per member: the epoch counted and its entries by class.
    origin_counts: HashMap<NodeId, (u64, ClassCounts)>,
}

/// Where a feed subscriber starts (as [`super::Subscription`]).
pub struct FeedSubscription {
    /// The feed sequence number of the first entry it gets.
    pub next: u64,
    /// Buffered entries from `since`.
    pub replay: Vec<Arc<FeedEntry>>,
    /// Entries appended after the snapshot.
    pub live: broadcast::Receiver<Arc<FeedEntry>>,
    /// Changes to `true` when the node shuts down.
    pub closed: watch::Receiver<bool>,
}

/// The merged stream of the cluster's events, as this node sees it.
pub struct ClusterFeed {
    me: NodeId,
    capacity: usize,
    ring: Mutex<FeedRing>,
    tx: broadcast::Sender<Arc<FeedEntry>>,
    closed: watch::Sender<bool>,
    /// Batches of a member that skipped sequence numbers (lost beyond its ring).
    gaps: prometheus_client::metrics::counter::Counter,
}

impl ClusterFeed {
    /// A feed run by `me`, keeping the last `capacity` entries (at least 1).
    pub fn new(me: NodeId, capacity: usize) -> ClusterFeed {
        let capacity = capacity.max(1);
        let (tx, _) = broadcast::channel(capacity.min(BROADCAST_MAX));
        let (closed, _) = watch::channel(false);
        ClusterFeed {
            me,
            capacity,
            ring: Mutex::new(FeedRing {
                entries: VecDeque::with_capacity(capacity.min(4096)),
                next: 0,
                origins: HashMap::new(),
                counts: ClassCounts::default(),
                origin_counts: HashMap::new(),
            }),
            tx,
            closed,
            gaps: Default::default(),
        }
    }

    /// The node running the feed.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Member batches that arrived after a gap in that member's sequence numbers.
    pub fn gaps(&self) -> u64 {
        self.gaps.get()
    }

    /// The epoch and next sequence number expected of `node` (`None`: nothing seen yet).
    pub fn position(&self, node: NodeId) -> Option<(u64, u64)> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.origins.get(&node).map(|o| (o.epoch, o.next_seq))
    }

    fn push(&self, ring: &mut FeedRing, node: NodeId, batch: Arc<Batch>) {
        ring.counts.add(batch.class);
        let origin = ring
            .origin_counts
            .entry(node)
            .or_insert_with(|| (batch.epoch, ClassCounts::default()));
        if origin.0 != batch.epoch {
            *origin = (batch.epoch, ClassCounts::default());
        }
        origin.1.add(batch.class);
        let entry = Arc::new(FeedEntry {
            feed_seq: ring.next,
            node,
            counts: Arc::new(ring.counts.clone()),
            origin_counts: Arc::new(origin.1.clone()),
            batch,
        });
        ring.next += 1;
        if ring.entries.len() == self.capacity {
            ring.entries.pop_front();
        }
        ring.entries.push_back(entry.clone());
        // Under the ring lock: live order is feed order. No receiver is not an error.
        let _ = self.tx.send(entry);
    }

    /// Appends `node`'s `batch` unless the feed has it already, it belongs to an older epoch,
    /// or that epoch's stream was ended by [`ClusterFeed::node_down`]; whether it was appended.
    pub fn accept(&self, node: NodeId, batch: Arc<Batch>) -> bool {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let known = ring.origins.get(&node).copied();
        let reannounced = batch.events.first() == Some(&EventKind::Epoch);
        if let Some(o) = known.filter(|o| o.ended && o.epoch == batch.epoch && !reannounced) {
            // Dropped, but remembered as seen so that pollers move past it.
            if batch.seq >= o.next_seq {
                ring.origins.insert(
                    node,
                    Origin {
                        next_seq: batch.seq + 1,
                        ..o
                    },
                );
            }
            return false;
        }
        let take = match known {
            None => true,
            Some(o) if batch.epoch > o.epoch => true,
            Some(o) if batch.epoch < o.epoch => false,
            // An ended epoch resumes only with a re-announcement (checked above).
            Some(o) => batch.seq >= o.next_seq,
        };
        if !take {
            return false;
        }
        let expected = match known {
            Some(o) if o.epoch == batch.epoch => o.next_seq,
            _ => 0,
        };
        if batch.seq > expected {
            self.gaps.inc();
        }
        let own_clear = batch.events.iter().find_map(|e| match e {
            EventKind::NodeDown { node: n, epoch } if *n == node => Some(*epoch),
            _ => None,
        });
        let cleared = match known {
            Some(o) if o.epoch == batch.epoch => own_clear.max(o.cleared),
            _ => own_clear,
        };
        ring.origins.insert(
            node,
            Origin {
                epoch: batch.epoch,
                next_seq: batch.seq + 1,
                ended: false,
                cleared,
            },
        );
        self.push(&mut ring, node, batch);
        true
    }

    /// `node`'s lease expired (its directory epoch `dir_epoch` ended): appends the batch that
    /// clears it in its own stream and ends that stream's epoch. Nothing when the feed never
    /// saw the member, already ended its epoch, or the stream already said this expiry (the
    /// member's own `NodeDown` of it, before its re-announcement).
    pub fn node_down(&self, node: NodeId, dir_epoch: u64) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let Some(o) = ring
            .origins
            .get(&node)
            .copied()
            .filter(|o| !o.ended && o.cleared.is_none_or(|c| c < dir_epoch))
        else {
            return;
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let events = vec![EventKind::NodeDown {
            node,
            epoch: dir_epoch,
        }];
        let payload = wire::encode_batch(ts, &events, node);
        // The clear takes the member's next sequence number without using it up: the member's
        // own batch of that number (its re-announcement, if that comes first) is still fetched.
        let batch = Arc::new(Batch::new(o.next_seq, o.epoch, ts, events, payload));
        ring.origins.insert(
            node,
            Origin {
                ended: true,
                cleared: Some(dir_epoch),
                ..o
            },
        );
        self.push(&mut ring, node, batch);
    }

    /// Subscribes from feed sequence number `since` (`None`: live entries only).
    pub fn subscribe(&self, since: Option<u64>) -> Result<FeedSubscription, ReplayGap> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = ring.entries.front().map_or(ring.next, |e| e.feed_seq);
        match since {
            Some(s) if s < oldest => Err(ReplayGap { oldest }),
            _ => Ok(self.subscribe_in(&ring, since)),
        }
    }

    /// [`ClusterFeed::subscribe`] for a reader of `read` resuming from position `since` of
    /// its view of the feed (as [`EventLog::subscribe_view`]).
    pub fn subscribe_view(
        &self,
        read: &[NamespaceKey],
        since: Option<u64>,
    ) -> Result<FeedSubscription, ReplayGap> {
        let Some(since) = since else {
            return self.subscribe(None);
        };
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let entries = ring
            .entries
            .iter()
            .map(|e| (e.feed_seq, &e.batch.class, &*e.counts));
        let start = views::view_start(entries, &ring.counts, read, since)?;
        let from = start.unwrap_or(ring.next);
        Ok(self.subscribe_in(&ring, Some(from)))
    }

    /// The oldest position of the feed's view of a reader of `read` still buffered.
    pub fn oldest_view(&self, read: &[NamespaceKey]) -> u64 {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let first = ring.entries.front().map(|e| (&e.batch.class, &*e.counts));
        views::oldest_view(first, &ring.counts, read)
    }

    /// A subscription from `since` (at or after the oldest buffered entry), under the lock.
    fn subscribe_in(&self, ring: &FeedRing, since: Option<u64>) -> FeedSubscription {
        let replay = match since {
            None => Vec::new(),
            Some(s) => ring
                .entries
                .iter()
                .filter(|e| e.feed_seq >= s)
                .cloned()
                .collect(),
        };
        FeedSubscription {
            next: since.unwrap_or(ring.next),
            replay,
            live: self.tx.subscribe(),
            closed: self.closed.subscribe(),
        }
    }

    /// Buffered entries with `feed_seq >= since`.
    pub fn buffered_from(&self, since: u64) -> Vec<Arc<FeedEntry>> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.entries
            .iter()
            .filter(|e| e.feed_seq >= since)
            .cloned()
            .collect()
    }

    /// The next feed sequence number.
    pub fn next_seq(&self) -> u64 {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).next
    }

    /// Buffered batches of `node`'s current epoch with `seq >= since` (a replay by member).
    pub fn member_from(&self, node: NodeId, since: u64) -> Vec<Arc<Batch>> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let Some(o) = ring.origins.get(&node) else {
            return Vec::new();
        };
        ring.entries
            .iter()
            .filter(|e| e.node == node && e.batch.epoch == o.epoch && e.batch.seq >= since)
            .map(|e| e.batch.clone())
            .collect()
    }

    /// Ends every subscription (at shutdown).
    pub fn close(&self) {
        let _ = self.closed.send(true);
    }

    /// Feeds this node's own batches (from the start of its epoch) into the feed, and reports
    /// every member whose lease expired in them ([`EventKind::NodeDown`]) to
    /// [`ClusterFeed::node_down`]. Ends when the log closes.
    pub fn follow(self: &Arc<Self>, log: Arc<EventLog>) -> JoinHandle<()> {
        let feed = self.clone();
        let me = log.node();
        let sub = log
            .subscribe(Some(0))
            .unwrap_or_else(|ReplayGap { oldest }| {
                log.subscribe(Some(oldest))
                    .expect("the oldest buffered batch is buffered")
            });
        tokio::spawn(async move {
            let mut next = sub.next;
            let mut live = sub.live;
            let mut closed = sub.closed;
            let mut pending: VecDeque<Arc<Batch>> = sub.replay.into();
            loop {
                while let Some(b) = pending.pop_front() {
                    if b.seq < next {
                        continue;
                    }
                    next = b.seq + 1;
                    let downs: Vec<(NodeId, u64)> = b
                        .events
                        .iter()
                        .filter_map(|e| match e {
                            EventKind::NodeDown { node, epoch } => Some((*node, *epoch)),
                            _ => None,
                        })
                        .collect();
                    feed.accept(me, b);
                    for (node, epoch) in downs {
                        feed.node_down(node, epoch);
                    }
                }
                if *closed.borrow() {
                    return;
                }
                tokio::select! {
                    r = live.recv() => match r {
                        Ok(b) => pending.push_back(b),
                        Err(RecvError::Lagged(_)) => pending.extend(log.buffered_from(next)),
                        Err(RecvError::Closed) => return,
                    },
                    _ = closed.changed() => return,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventMetrics;

    fn batch(epoch: u64, seq: u64) -> Arc<Batch> {
        Arc::new(Batch::new(seq, epoch, 1.0, Vec::new(), Default::default()))
    }

    #[test]
    fn per_member_order_epochs_and_the_clear_of_a_member_that_went_down() {
        let f = ClusterFeed::new(NodeId(1), 16);
        let n2 = NodeId(2);
        assert!(f.accept(n2, batch(5, 0)));
        assert!(f.accept(n2, batch(5, 1)));
        assert!(
            !f.accept(n2, batch(5, 1)),
            "a batch the feed has is dropped"
        );
        assert!(!f.accept(n2, batch(4, 9)), "an older epoch is dropped");
        assert!(f.accept(n2, batch(5, 3)), "a gap is kept and counted");
        assert_eq!(f.gaps(), 1);
        f.node_down(n2, 7);
        let last = f.buffered_from(0).pop().unwrap();
        assert_eq!((last.node, last.batch.epoch, last.batch.seq), (n2, 5, 4));
        assert_eq!(
            f.position(n2),
            Some((5, 4)),
            "the member's batch 4 is still asked for"
        );
        let v = rmpv::decode::read_value(&mut &last.batch.payload[..]).unwrap();
        let cleared = &v.as_array().unwrap()[1].as_array().unwrap()[0];
        assert_eq!(
            cleared.as_map().unwrap()[0].1.as_str(),
            Some("AllBlocksCleared")
        );
        f.node_down(n2, 7);
        assert!(!f.accept(n2, batch(5, 5)), "the ended epoch stays ended");
        let reannounce = |seq| {
            Arc::new(Batch::new(
                seq,
                5,
                1.0,
                vec![EventKind::Epoch],
                Default::default(),
            ))
        };
        assert!(!f.accept(n2, reannounce(5)), "a batch it has seen");
        assert!(
            f.accept(n2, reannounce(6)),
            "until the member announces itself again"
        );
        assert!(f.accept(n2, batch(5, 7)));
        f.node_down(n2, 8);
        assert!(
            f.accept(n2, batch(6, 0)),
            "a new epoch starts the stream over"
        );
        assert_eq!(f.gaps(), 1);
        let seqs: Vec<u64> = f.buffered_from(0).iter().map(|e| e.feed_seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(f.member_from(n2, 0).len(), 1);
        assert_eq!(f.position(n2), Some((6, 1)));
        // A member that said its own expiry and re-announced is not cleared by a late report.
        let n3 = NodeId(3);
        assert!(f.accept(n3, batch(1, 0)));
        let own = Arc::new(Batch::new(
            1,
            1,
            1.0,
            vec![EventKind::NodeDown { node: n3, epoch: 4 }],
            Default::default(),
        ));
        assert!(f.accept(n3, own));
        let before = f.next_seq();
        f.node_down(n3, 4);
        assert_eq!(f.next_seq(), before, "a stale report of the same expiry");
        f.node_down(n3, 5);
        assert_eq!(f.next_seq(), before + 1);
        f.node_down(NodeId(9), 1);
        assert_eq!(
            f.next_seq(),
            before + 1,
            "a member never seen is not cleared"
        );
    }

    #[tokio::test]
    async fn following_the_own_log_feeds_every_batch_and_clears_members_reported_down() {
        let log = Arc::new(EventLog::new(NodeId(1), 3, 8, EventMetrics::default()));
        log.publish(vec![EventKind::Epoch]);
        let f = Arc::new(ClusterFeed::new(NodeId(1), 16));
        assert!(f.accept(NodeId(2), batch(1, 0)));
        let mut sub = f.subscribe(None).unwrap();
        let task = f.follow(log.clone());
        log.publish(vec![EventKind::NodeDown {
            node: NodeId(2),
            epoch: 4,
        }]);
        let mut got = Vec::new();
        for _ in 0..3 {
            let e = sub.live.recv().await.unwrap();
            got.push((e.node, e.batch.seq));
        }
        assert_eq!(got, [(NodeId(1), 0), (NodeId(1), 1), (NodeId(2), 1)]);
        log.close();
        task.await.unwrap();
    }

    #[test]
    fn a_tenants_feed_positions_count_only_what_it_sees_per_feed_and_per_member() {
        use kvfabric_store::{BlockId, Tier};
        let (a, b) = (NamespaceKey::derive("a"), NamespaceKey::derive("b"));
        let stored = |ns: NamespaceKey| EventKind::Stored {
            namespace: ns,
            tier: Tier::Host,
            ids: vec![BlockId([1; 32])],
            chunk_key: None,
            info: crate::events::BlockInfo::tokens(64),
        };
        let of = |seq, events| Arc::new(Batch::new(seq, 1, 1.0, events, Default::default()));
        let f = ClusterFeed::new(NodeId(1), 16);
        let (n2, n3) = (NodeId(2), NodeId(3));
        assert!(f.accept(n2, of(0, vec![EventKind::Epoch])));
        assert!(f.accept(n3, of(0, vec![EventKind::Epoch])));
        // a's batches between b's, on both members.
        for (n, seq, ns) in [
            (n2, 1, a),
            (n2, 2, b),
            (n3, 1, a),
            (n3, 2, a),
            (n3, 3, b),
            (n2, 3, b),
        ] {
            assert!(f.accept(n, of(seq, vec![stored(ns)])));
        }
        let entries = f.buffered_from(0);
        let b_feed: Vec<u64> = entries.iter().filter_map(|e| e.view_seq(&[b])).collect();
        assert_eq!(b_feed, [0, 1, 2, 3, 4], "two epochs, then b's three");
        let b_member = |n: NodeId| -> Vec<u64> {
            entries
                .iter()
                .filter(|e| e.node == n)
                .filter_map(|e| e.origin_view_seq(&[b]))
                .collect()
        };
        assert_eq!((b_member(n2), b_member(n3)), (vec![0, 1, 2], vec![0, 1]));
        // Resuming b after its feed position 2 replays its positions 3 and 4 only.
        let sub = f.subscribe_view(&[b], Some(3)).unwrap();
        let replayed: Vec<u64> = sub.replay.iter().filter_map(|e| e.view_seq(&[b])).collect();
        assert_eq!(replayed, [3, 4]);
        assert_eq!(f.oldest_view(&[b]), 0);
    }
}
