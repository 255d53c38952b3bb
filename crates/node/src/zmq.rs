//! The ZeroMQ side of the event log, vLLM 0.33.0's `ZmqEventPublisher` protocol (pure-Rust
//! `zeromq` crate, no system library):
//!
//! - a PUB socket bound at `events.zmq_pub` sends every batch as the multipart message
//!   `[topic, seq as 8-byte big-endian, payload]` (payload: `kvfabric_core::events::wire`);
//! - a ROUTER socket bound at `events.zmq_replay` answers a request `["", start_seq as 8-byte
//!   big-endian]` (a DEALER's frames; the ROUTER sees the peer identity first) with
//!   `["", topic, seq, payload]` for every buffered batch with `seq >= start_seq`, then
//!   `["", "", -1 as 8-byte big-endian, ""]`, as vLLM's `_service_replay` does. A malformed
//!   request is counted and ignored.
//!
//! With the cluster feed (`events.cluster_zmq_pub`, `events.cluster_zmq_replay`) the same two
//! sockets carry every member's batches, each under its member's topic (`kvfabric.n<id>`) with
//! that member's own sequence number; a replay request may name a topic
//! (`["", topic, start_seq]`: that member's current epoch from `start_seq`) or not (every
//! member's).
//!
//! All are operator-level: every event of every namespace, token ids included, no token.
//! They are off unless configured; binding them anywhere but loopback exposes the stream to
//! that network.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::config::events::member_topic;
use crate::config::EventsConfig;
use kvfabric_core::events::cluster::ClusterFeed;
use kvfabric_core::events::{Batch, EventLog, EventMetrics};
use kvfabric_core::NodeId;

/// The sequence number that ends a replay.
pub(crate) const END_SEQ: i64 = -1;
/// Longest wait to hand one replay message to a peer (a peer that does not read loses the
/// rest of its replay, and the next peer is served).
const REPLAY_SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed receive on the replay socket.
const RECV_BACKOFF: Duration = Duration::from_millis(100);

/// The running ZeroMQ sockets' tasks.
pub(crate) struct ZmqTasks {
    tasks: Vec<JoinHandle<()>>,
}

impl ZmqTasks {
    /// Stops every socket.
    pub(crate) fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One replay answer: a batch under its topic.
struct Replayed {
    topic: Bytes,
    seq: u64,
    payload: Bytes,
}

/// What a replay request asks for: an optional topic and the first sequence number.
pub(crate) type Request = (Option<Bytes>, u64);

/// Binds the configured sockets and starts serving them; `None` when none is configured.
/// Each publisher subscribes before returning, so it sends every batch published after.
pub(crate) async fn start(
    log: Arc<EventLog>,
    feed: Option<Arc<ClusterFeed>>,
    config: &EventsConfig,
) -> anyhow::Result<Option<ZmqTasks>> {
    let mut tasks = Vec::new();
    let metrics = log.metrics.clone();
    if let Some(endpoint) = &config.zmq_pub {
        let socket = bind_pub("events.zmq_pub", endpoint, "ZeroMQ publisher bound").await?;
        let topic = Bytes::from(config.topic.clone().into_bytes());
        let sub = log
            .subscribe(None)
            .expect("a live-only subscription has no gap");
        tasks.push(tokio::spawn(publish(log.clone(), socket, topic, sub.live)));
    }
    if let Some(endpoint) = &config.zmq_replay {
        let socket = bind_router("events.zmq_replay", endpoint, "ZeroMQ replay bound").await?;
        let (log2, topic) = (log.clone(), Bytes::from(config.topic.clone().into_bytes()));
        let answer = move |(_, start): Request| {
            let batches = log2.buffered_from(start);
            let oldest = batches.first().map_or(log2.next_seq(), |b| b.seq);
            if start < oldest {
                log2.metrics.gaps.inc();
            }
            batches
                .iter()
                .map(|b| Replayed {
                    topic: topic.clone(),
                    seq: b.seq,
                    payload: b.payload.clone(),
                })
                .collect()
        };
        tasks.push(tokio::spawn(replay(metrics.clone(), socket, answer)));
    }
    if let (Some(feed), Some(endpoint)) = (&feed, &config.cluster_zmq_pub) {
        let socket = bind_pub(
            "events.cluster_zmq_pub",
            endpoint,
            "ZeroMQ cluster publisher bound",
        )
        .await?;
        let sub = feed
            .subscribe(None)
            .expect("a live-only subscription has no gap");
        tasks.push(tokio::spawn(publish_feed(feed.clone(), socket, sub.live)));
    }
    if let (Some(feed), Some(endpoint)) = (&feed, &config.cluster_zmq_replay) {
        let socket = bind_router(
            "events.cluster_zmq_replay",
            endpoint,
            "ZeroMQ cluster replay bound",
        )
        .await?;
        let feed = feed.clone();
        let answer = move |(topic, start): Request| feed_replay(&feed, topic, start);
        tasks.push(tokio::spawn(replay(metrics, socket, answer)));
    }
    Ok((!tasks.is_empty()).then_some(ZmqTasks { tasks }))
}

async fn bind_pub(key: &str, endpoint: &str, what: &'static str) -> anyhow::Result<PubSocket> {
    let mut socket = PubSocket::new();
    let bound = socket
        .bind(endpoint)
        .await
        .with_context(|| format!("binding {key} {endpoint}"))?;
    tracing::info!(endpoint = %bound, "events: {what}");
    Ok(socket)
}

async fn bind_router(
    key: &str,
    endpoint: &str,
    what: &'static str,
) -> anyhow::Result<RouterSocket> {
    let mut socket = RouterSocket::new();
    let bound = socket
        .bind(endpoint)
        .await
        .with_context(|| format!("binding {key} {endpoint}"))?;
    tracing::info!(endpoint = %bound, "events: {what}");
    Ok(socket)
}

/// The feed's buffered batches for a replay request: one member's (by topic) or every
/// member's, each from `start` of its current epoch.
fn feed_replay(feed: &ClusterFeed, topic: Option<Bytes>, start: u64) -> Vec<Replayed> {
    let mut nodes: Vec<NodeId> = feed.buffered_from(0).iter().map(|e| e.node).collect();
    nodes.sort();
    nodes.dedup();
    nodes
        .into_iter()
        .map(|n| (n, Bytes::from(member_topic(n).into_bytes())))
        .filter(|(_, t)| topic.as_ref().is_none_or(|want| want == t))
        .flat_map(|(n, t)| {
            feed.member_from(n, start)
                .into_iter()
                .map(move |b| Replayed {
                    topic: t.clone(),
                    seq: b.seq,
                    payload: b.payload.clone(),
                })
        })
        .collect()
}

fn frames(v: Vec<Bytes>) -> ZmqMessage {
    ZmqMessage::try_from(v).expect("never empty")
}

/// Sends every batch on the PUB socket; a publisher that lagged behind the broadcast takes
/// the missed batches from the ring (those still there).
async fn publish(
    log: Arc<EventLog>,
    mut socket: PubSocket,
    topic: Bytes,
    mut live: tokio::sync::broadcast::Receiver<Arc<Batch>>,
) {
    let mut next: Option<u64> = None;
    loop {
        let batches = match live.recv().await {
            Ok(b) => vec![b],
            Err(RecvError::Lagged(_)) => {
                let from = next.unwrap_or(0);
                let missed = log.buffered_from(from);
                if missed.first().is_some_and(|b| b.seq > from) {
                    log.metrics.gaps.inc();
                }
                missed
            }
            Err(RecvError::Closed) => return,
        };
        for b in batches {
            if next.is_some_and(|n| b.seq < n) {
                continue;
            }
            next = Some(b.seq + 1);
            let msg = frames(vec![
                topic.clone(),
                Bytes::copy_from_slice(&b.seq.to_be_bytes()),
                b.payload.clone(),
            ]);
            if let Err(e) = socket.send(msg).await {
                tracing::warn!(error = %e, seq = b.seq, "events: ZeroMQ publish failed");
            }
        }
    }
}

/// Sends the cluster feed on its PUB socket, each batch under its member's topic; a
/// publisher that lagged behind the broadcast takes the missed entries from the feed's ring.
async fn publish_feed(
    feed: Arc<ClusterFeed>,
    mut socket: PubSocket,
    mut live: tokio::sync::broadcast::Receiver<Arc<kvfabric_core::events::cluster::FeedEntry>>,
) {
    let mut next: Option<u64> = None;
    loop {
        let entries = match live.recv().await {
            Ok(e) => vec![e],
            Err(RecvError::Lagged(_)) => feed.buffered_from(next.unwrap_or(0)),
            Err(RecvError::Closed) => return,
        };
        for e in entries {
            if next.is_some_and(|n| e.feed_seq < n) {
                continue;
            }
            next = Some(e.feed_seq + 1);
            let msg = frames(vec![
                Bytes::from(member_topic(e.node).into_bytes()),
                Bytes::copy_from_slice(&e.batch.seq.to_be_bytes()),
                e.batch.payload.clone(),
            ]);
            if let Err(err) = socket.send(msg).await {
                tracing::warn!(error = %err, node = %e.node, "events: ZeroMQ cluster publish failed");
            }
        }
    }
}

/// Serves replay requests on a ROUTER socket: `["", start_seq]` or `["", topic, start_seq]`
/// after the peer identity, answered from `answer`.
/// A replay request as the ROUTER socket receives it: `[peer, "", start_seq]` or
/// `[peer, "", topic, start_seq]`, the sequence number 8 bytes big-endian; `None` for anything
/// else.
pub(crate) fn decode_request(msg: &[Bytes]) -> Option<Request> {
    let seq = |b: &Bytes| Some(u64::from_be_bytes(b[..].try_into().ok()?));
    match msg {
        [_, delim, s] if delim.is_empty() => seq(s).map(|s| (None, s)),
        [_, delim, topic, s] if delim.is_empty() => seq(s).map(|s| (Some(topic.clone()), s)),
        _ => None,
    }
}

async fn replay(
    metrics: EventMetrics,
    mut socket: RouterSocket,
    answer: impl Fn(Request) -> Vec<Replayed> + Send + 'static,
) {
    loop {
        let msg = match socket.recv().await {
            Ok(m) => m.into_vec(),
            Err(e) => {
                tracing::debug!(error = %e, "events: ZeroMQ replay receive failed");
                tokio::time::sleep(RECV_BACKOFF).await;
                continue;
            }
        };
        let Some(request) = decode_request(&msg) else {
            metrics.zmq_bad_requests.inc();
            tracing::debug!(
                frames = msg.len(),
                "events: malformed ZeroMQ replay request"
            );
            continue;
        };
        let peer = msg[0].clone();
        metrics.replays.inc();
        let mut failed = false;
        for r in answer(request) {
            let reply = frames(vec![
                peer.clone(),
                Bytes::new(),
                r.topic,
                Bytes::copy_from_slice(&r.seq.to_be_bytes()),
                r.payload,
            ]);
            if !send_bounded(&mut socket, reply).await {
                failed = true;
                break;
            }
        }
        if !failed {
            let end = frames(vec![
                peer,
                Bytes::new(),
                Bytes::new(),
                Bytes::copy_from_slice(&END_SEQ.to_be_bytes()),
                Bytes::new(),
            ]);
            send_bounded(&mut socket, end).await;
        }
    }
}

/// Sends one replay message within [`REPLAY_SEND_TIMEOUT`]; `false` when it failed.
async fn send_bounded(socket: &mut RouterSocket, msg: ZmqMessage) -> bool {
    match tokio::time::timeout(REPLAY_SEND_TIMEOUT, socket.send(msg)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "events: ZeroMQ replay send failed");
            false
        }
        Err(_) => {
            tracing::debug!("events: ZeroMQ replay peer does not read; its replay is cut");
            false
        }
    }
}
