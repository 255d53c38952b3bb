//! How a member's batches reach another member's [`ClusterFeed`]: the feed's node polls each
//! other member over the control channel (`events {epoch, since, first}`, mutual TLS) every
//! [`POLL_MS`], and the member answers from its own log's ring ([`serve`]) with the batches
//! from `since` of its current epoch (from 0 when `epoch` is not its current one), at most
//! [`POLL_REPLY_BYTES_MAX`] of events per answer: a batch larger than that comes in parts
//! (`first` is the index of its first event not received yet, `complete` marks the last
//! part). The poller rebuilds each batch, encodes its payload for that member's stream and
//! hands it to the feed, which drops what it has.
//!
//! The same channel carries what a member's events say of one block ([`peer_engine`]): a
//! member taking a copy of a block (a remote get, a replica) asks the member it copies from,
//! so the copy is published under the same engine identity as the original.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::cluster::ClusterFeed;
use super::{wire, Batch, EventKind, EventLog};
use crate::cluster::control::{ControlRequest, ControlResponse};
use crate::cluster::Cluster;
use crate::ids::NodeId;

/// Pause between polls of one member that had nothing new.
pub const POLL_MS: u64 = 200;
/// Bound on one poll.
pub const POLL_TIMEOUT_MS: u64 = 2_000;
/// Most bytes of events (as JSON) in one answer; well under the control frame's bound, and
/// above the largest single event (an announcement of
/// [`crate::local::ANNOUNCE_IDS_MAX`] ids, or one block's engine record).
pub const POLL_REPLY_BYTES_MAX: usize = 40 * 1024;

/// One batch, or a part of one, in a poll's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolledBatch {
    /// Its sequence number in the member's epoch.
    pub seq: u64,
    /// When the member published it.
    pub ts: f64,
    /// The index of the first event in `events` within the batch.
    pub first: u32,
    /// Its events from `first` on.
    pub events: Vec<EventKind>,
    /// Whether `events` ends the batch.
    pub complete: bool,
}

/// A poll's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PollReply {
    /// The member's current epoch.
    pub epoch: u64,
    /// Its batches from the one asked for, in order.
    pub batches: Vec<PolledBatch>,
}

/// Answers a poll from `log`: batches from `since` (its event `first` on) of `epoch`, or of
/// the current epoch from its start when `epoch` is another.
pub fn serve(log: &EventLog, epoch: u64, since: u64, first: u32) -> PollReply {
    let (since, first) = if epoch == log.epoch() {
        (since, first)
    } else {
        (0, 0)
    };
    let mut budget = POLL_REPLY_BYTES_MAX;
    let mut batches = Vec::new();
    'batches: for b in log.buffered_from(since) {
        let skip = if b.seq == since { first as usize } else { 0 };
        let mut part = PolledBatch {
            seq: b.seq,
            ts: b.ts,
            first: skip as u32,
            events: Vec::new(),
            complete: true,
        };
        for (i, e) in b.events.iter().enumerate().skip(skip) {
            let len = serde_json::to_vec(e).map_or(usize::MAX, |v| v.len() + 1);
            let nothing_sent = batches.is_empty() && part.events.is_empty();
            if len > budget && !nothing_sent {
                if !part.events.is_empty() {
                    part.complete = i == b.events.len();
                    batches.push(part);
                }
                break 'batches;
            }
            budget = budget.saturating_sub(len);
            part.events.push(e.clone());
        }
        batches.push(part);
    }
    PollReply {
        epoch: log.epoch(),
        batches,
    }
}

/// Upper bound on asking a peer for a block's engine identity.
pub const BLOCK_INFO_TIMEOUT_MS: u64 = 2_000;

/// The engine identity member `node` has for `id` in `ns` (none when it has none, is
/// suspected, or does not answer within `failover.suspect_ms`, at most
/// [`BLOCK_INFO_TIMEOUT_MS`]: the copy is then published under its id). A get that already
/// holds verified bytes waits on this, so it is bounded like a silent peer, not like a
/// transfer: a source that fell silent right after serving costs a get 0.4 s, not 2 s.
pub(crate) async fn peer_engine(
    cluster: &Cluster,
    node: NodeId,
    ns: kvfabric_store::NamespaceKey,
    id: kvfabric_store::BlockId,
) -> Option<Arc<super::EngineBlock>> {
    if cluster.health.is_suspect(node) {
        return None;
    }
    let addr = cluster.message_peer(node)?.addr;
    let req = ControlRequest::BlockInfo {
        namespace: ns,
        block: id,
    };
    let limit =
        Duration::from_millis(BLOCK_INFO_TIMEOUT_MS.min(cluster.config.failover.suspect_ms));
    match cluster.control(node, addr, &req, limit).await {
        Ok(ControlResponse::BlockInfo { info }) => info.and_then(|i| i.engine),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(block = %id, %node, error = %e, "asking for a block's engine identity failed");
            None
        }
    }
}

/// A batch being reassembled from parts.
struct Partial {
    epoch: u64,
    seq: u64,
    ts: f64,
    events: Vec<EventKind>,
}

/// What to ask `node` for next: the rest of the batch being reassembled, else what follows
/// the feed's position.
fn next_poll(feed: &ClusterFeed, node: NodeId, partial: Option<&Partial>) -> (u64, u64, u32) {
    match partial {
        Some(p) => (p.epoch, p.seq, p.events.len() as u32),
        None => {
            let (epoch, since) = feed.position(node).unwrap_or((0, 0));
            (epoch, since, 0)
        }
    }
}

/// Applies one answer of `node` to the feed; whether it carried anything.
fn apply(
    feed: &ClusterFeed,
    node: NodeId,
    reply: PollReply,
    partial: &mut Option<Partial>,
) -> bool {
    let any = !reply.batches.is_empty();
    for b in reply.batches {
        let continues = partial.as_ref().is_some_and(|p| {
            p.epoch == reply.epoch && p.seq == b.seq && p.events.len() == b.first as usize
        });
        if !continues {
            *partial = None;
            if b.first != 0 {
                // A part whose beginning this poller does not have: ask for it again.
                continue;
            }
        }
        let p = partial.get_or_insert_with(|| Partial {
            epoch: reply.epoch,
            seq: b.seq,
            ts: b.ts,
            events: Vec::new(),
        });
        p.events.extend(b.events);
        if b.complete {
            let p = partial.take().expect("just filled");
            let payload = wire::encode_batch(p.ts, &p.events, node);
            feed.accept(
                node,
                Arc::new(Batch::new(p.seq, p.epoch, p.ts, p.events, payload)),
            );
        }
    }
    any
}

/// Starts one poller per other member; they end when `closed` turns true.
pub(crate) fn spawn(
    cluster: Arc<Cluster>,
    feed: Arc<ClusterFeed>,
    closed: tokio::sync::watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let members: Vec<_> = cluster
        .config
        .members
        .iter()
        .filter(|m| m.id != cluster.me)
        .map(|m| (m.id, crate::cluster::message_peer(&cluster.config, m).addr))
        .collect();
    members
        .into_iter()
        .map(|(node, addr)| {
            let (cluster, feed, mut closed) = (cluster.clone(), feed.clone(), closed.clone());
            tokio::spawn(async move {
                let mut partial: Option<Partial> = None;
                loop {
                    if *closed.borrow() {
                        return;
                    }
                    let (epoch, since, first) = next_poll(&feed, node, partial.as_ref());
                    let req = ControlRequest::Events {
                        epoch,
                        since,
                        first,
                    };
                    let limit = Duration::from_millis(POLL_TIMEOUT_MS);
                    let more = match cluster.control(node, addr, &req, limit).await {
                        Ok(ControlResponse::Events(reply)) => {
                            apply(&feed, node, reply, &mut partial)
                        }
                        Ok(other) => {
                            tracing::debug!(%node, ?other, "events poll: unexpected answer");
                            false
                        }
                        Err(e) => {
                            tracing::debug!(%node, error = %e, "events poll failed");
                            false
                        }
                    };
                    if !more {
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(POLL_MS)) => {}
                            _ = closed.changed() => return,
                        }
                    }
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use kvfabric_store::{BlockId, NamespaceKey, Tier};

    use super::*;
    use crate::events::{BlockInfo, EventMetrics};

    fn stored(ids: usize) -> EventKind {
        EventKind::Stored {
            namespace: NamespaceKey::derive("a"),
            tier: Tier::Host,
            ids: (0..ids).map(|i| BlockId([i as u8; 32])).collect(),
            chunk_key: None,
            info: BlockInfo::tokens(64),
        }
    }

    #[test]
    fn large_batches_come_in_parts_and_are_rebuilt_whole() {
        let log = EventLog::new(NodeId(2), 4, 64, EventMetrics::default());
        let big: Vec<EventKind> = std::iter::once(EventKind::Epoch)
            .chain((0..12).map(|_| stored(crate::local::ANNOUNCE_IDS_MAX)))
            .collect();
        log.publish(big.clone());
        log.publish(vec![stored(1)]);
        let feed = ClusterFeed::new(NodeId(1), 16);
        let mut partial = None;
        let mut polls = 0;
        loop {
            let (epoch, since, first) = next_poll(&feed, NodeId(2), partial.as_ref());
            let reply = serve(&log, epoch, since, first);
            let bytes = serde_json::to_vec(&reply).unwrap().len();
            assert!(
                bytes < crate::cluster::net::CONTROL_CHANNEL.message_bytes_max as usize,
                "{bytes}"
            );
            polls += 1;
            if !apply(&feed, NodeId(2), reply, &mut partial) {
                break;
            }
            assert!(polls < 100);
        }
        assert!(polls > 3, "the announcement took several answers ({polls})");
        let got = feed.buffered_from(0);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].batch.events, big);
        assert_eq!((got[0].batch.epoch, got[0].batch.seq), (4, 0));
        assert_eq!(got[0].batch.payload, log.buffered_from(0)[0].payload);
        assert_eq!(got[1].batch.seq, 1);
        // Another epoch asked for: the current one from its start.
        assert_eq!(serve(&log, 3, 1, 0).batches[0].seq, 0);
    }
}
