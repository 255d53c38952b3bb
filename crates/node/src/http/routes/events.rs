//! `GET /v1/events`: KV events as Server-Sent Events — this node's (`scope=node`, the
//! default) or the whole cluster's (`scope=cluster`, the cluster feed of this node, when
//! `events.cluster_feed` is on).
//!
//! Each event of a batch is one SSE message: `event: epoch | stored | removed | node_down`
//! and a JSON `data` line naming the node whose event it is, that node's epoch and sequence
//! number, the batch's `ts`, and the event's fields ([`events_render`](super::events_render));
//! the last message of a batch carries `id: EPOCH:SEQ` — this node's epoch and the stream's
//! position (the node stream: the batch's sequence number; the cluster stream: the feed's).
//! `?since=SEQ` replays from that position of the current epoch (410 `replay_gap` naming the
//! oldest still buffered when it is older); without it a `Last-Event-ID: EPOCH:SEQ` resumes
//! after that position (from the start when `EPOCH` is an earlier one); with neither the
//! stream starts with the next batch. Then it follows live. A stream that falls behind the
//! live broadcast catches up from the ring; one that falls further behind than the ring
//! holds gets one `replay_gap` message and ends. Every stream ends when the node shuts down.
//!
//! A tenant sees `stored`/`removed` only for namespaces its token may read (its own and the
//! shared ones), and every `epoch` and `node_down`; and every position it is shown or resumes
//! from (`id`, `seq`, `feed_seq`, `since`, a `replay_gap`'s) counts only the batches it sees
//! (`kvfabric_core::events::views`), so no number moves with another tenant's activity. An
//! operator's (and an open node's) are the log's and the feed's own. At most `events.max_sse_subscribers`
//! streams are open at once (503 `too_many_subscribers` beyond).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use kvfabric_core::events::cluster::{ClusterFeed, FeedEntry};
use kvfabric_core::events::views::{self, ClassCounts};
use kvfabric_core::events::{Batch, EventLog, ReplayGap};
use kvfabric_core::NodeId;
use kvfabric_store::NamespaceKey;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch, OwnedSemaphorePermit};

use super::events_render::render;
use crate::http::errors::ApiError;
use crate::http::headers::decimal;
use crate::http::AppState;

/// The header a reconnecting `EventSource` sends.
pub(crate) const LAST_EVENT_ID: &str = "last-event-id";

/// Which stream a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Node,
    Cluster,
}

/// The query: `since` and `scope`.
pub(crate) fn query(uri: &Uri) -> Result<(Option<u64>, Scope), ApiError> {
    let (mut since, mut scope) = (None, None);
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("since", v)) if since.is_none() => {
                let s = decimal(v).ok_or_else(|| {
                    ApiError::InvalidQuery(format!(
                        "since: expected a sequence number (0 to {}), found {:?}",
                        u64::MAX,
                        v.chars().take(40).collect::<String>()
                    ))
                })?;
                since = Some(s);
            }
            Some(("scope", v)) if scope.is_none() => {
                scope = Some(match v {
                    "node" => Scope::Node,
                    "cluster" => Scope::Cluster,
                    _ => {
                        return Err(ApiError::InvalidQuery(format!(
                            "scope: expected node or cluster, found {:?}",
                            v.chars().take(40).collect::<String>()
                        )))
                    }
                });
            }
            _ => {
                return Err(ApiError::InvalidQuery(format!(
                    "expected only `since=SEQ` and `scope=node|cluster`, found {:?}",
                    pair.chars().take(40).collect::<String>()
                )))
            }
        }
    }
    Ok((since, scope.unwrap_or(Scope::Node)))
}

/// Where a stream starts: `since`, else after the `Last-Event-ID`, else live (`None`).
pub(crate) fn start(
    epoch: u64,
    headers: &HeaderMap,
    since: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    if since.is_some() {
        return Ok(since);
    }
    let Some(v) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let invalid = || ApiError::InvalidHeader {
        name: "Last-Event-ID",
        reason: "expected EPOCH:SEQ as sent in an event's `id`".into(),
    };
    let (last_epoch, seq) = v
        .to_str()
        .ok()
        .and_then(|s| s.split_once(':'))
        .and_then(|(e, s)| Some((decimal(e)?, decimal(s)?)))
        .ok_or_else(invalid)?;
    match last_epoch.cmp(&epoch) {
        std::cmp::Ordering::Less => Ok(Some(0)),
        std::cmp::Ordering::Equal => Ok(Some(seq.saturating_add(1))),
        std::cmp::Ordering::Greater => Err(ApiError::InvalidHeader {
            name: "Last-Event-ID",
            reason: format!("epoch {last_epoch} is newer than this node's ({epoch})"),
        }),
    }
}

/// One batch as a stream delivers it: whose it is, its position in the stream, and the
/// counts a tenant's positions come from ([`views`]): the stream's up to it, and (the cluster
/// feed) the member's own stream's.
struct Item {
    node: NodeId,
    batch: Arc<Batch>,
    pos: u64,
    counts: Arc<ClassCounts>,
    origin_counts: Option<Arc<ClassCounts>>,
}

/// What a stream reads from.
enum Source {
    Node(Arc<EventLog>, broadcast::Receiver<Arc<Batch>>),
    Cluster(Arc<ClusterFeed>, broadcast::Receiver<Arc<FeedEntry>>),
}

fn node_item(node: NodeId, b: Arc<Batch>) -> Item {
    Item {
        node,
        pos: b.seq,
        counts: b.counts.clone(),
        origin_counts: None,
        batch: b,
    }
}

fn feed_item(e: &FeedEntry) -> Item {
    Item {
        node: e.node,
        batch: e.batch.clone(),
        pos: e.feed_seq,
        counts: e.counts.clone(),
        origin_counts: Some(e.origin_counts.clone()),
    }
}

impl Source {
    /// Buffered items from `pos`.
    fn buffered_from(&self, pos: u64) -> Vec<Item> {
        match self {
            Source::Node(log, _) => {
                let me = log.node();
                log.buffered_from(pos)
                    .into_iter()
                    .map(|b| node_item(me, b))
                    .collect()
            }
            Source::Cluster(feed, _) => feed
                .buffered_from(pos)
                .iter()
                .map(|e| feed_item(e))
                .collect(),
        }
    }

    /// The oldest buffered position.
    fn oldest(&self) -> u64 {
        match self {
            Source::Node(log, _) => log
                .buffered_from(0)
                .first()
                .map_or(log.next_seq(), |b| b.seq),
            Source::Cluster(feed, _) => feed
                .buffered_from(0)
                .first()
                .map_or(feed.next_seq(), |e| e.feed_seq),
        }
    }

    /// The oldest buffered position of the view of a reader of `read`.
    fn oldest_view(&self, read: &[NamespaceKey]) -> u64 {
        match self {
            Source::Node(log, _) => log.oldest_view(read),
            Source::Cluster(feed, _) => feed.oldest_view(read),
        }
    }

    /// The next live item.
    async fn recv(&mut self) -> Result<Item, RecvError> {
        match self {
            Source::Node(log, rx) => rx.recv().await.map(|b| node_item(log.node(), b)),
            Source::Cluster(_, rx) => rx.recv().await.map(|e| feed_item(&e)),
        }
    }
}

/// `GET /v1/events`.
pub(crate) async fn events(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let caller = app.tenancy.caller(&headers)?;
    let read = caller.read(&headers)?;
    let own = (!app.tenancy.is_open()).then_some(caller.own_keys());
    stream_events(&app, &headers, &uri, read, own)
}

/// A stream of the events of namespaces `read` (every `epoch` and `node_down` too), from
/// where `headers` and `uri` say; token ids only of blocks of `own` (`None`: of every block,
/// for an open node or an operator).
pub(super) fn stream_events(
    app: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    read: Vec<NamespaceKey>,
    own: Option<Vec<NamespaceKey>>,
) -> Result<Response, ApiError> {
    let log = app.events.clone();
    let (since, scope) = query(uri)?;
    let since = start(log.epoch(), headers, since)?;
    let feed = match scope {
        Scope::Node => None,
        Scope::Cluster => Some(app.feed.clone().ok_or(ApiError::ClusterFeedOff)?),
    };
    let Ok(permit) = app.sse_slots.clone().try_acquire_owned() else {
        log.metrics.refused.inc();
        return Err(ApiError::TooManySubscribers(app.sse_max));
    };
    let gap = |ReplayGap { oldest }| {
        log.metrics.gaps.inc();
        ApiError::ReplayGap {
            since: since.unwrap_or(0),
            oldest,
            epoch: log.epoch(),
        }
    };
    // A tenant's positions are those of its view ([`views`]): the batches it sees, no others.
    let tenant = own.is_some();
    let (source, next, replay, closed) = match feed {
        None => {
            let sub = match tenant {
                true => log.subscribe_view(&read, since),
                false => log.subscribe(since),
            }
            .map_err(gap)?;
            let me = log.node();
            let replay = sub.replay.into_iter().map(|b| node_item(me, b)).collect();
            (
                Source::Node(log.clone(), sub.live),
                sub.next,
                replay,
                sub.closed,
            )
        }
        Some(feed) => {
            let sub = match tenant {
                true => feed.subscribe_view(&read, since),
                false => feed.subscribe(since),
            }
            .map_err(gap)?;
            let replay = sub.replay.iter().map(|e| feed_item(e)).collect();
            (
                Source::Cluster(feed, sub.live),
                sub.next,
                replay,
                sub.closed,
            )
        }
    };
    if since.is_some() {
        log.metrics.replays.inc();
    }
    log.metrics.subscribers.inc();
    let state = Stream {
        source,
        epoch: log.epoch(),
        me: log.node(),
        read,
        own,
        next,
        view_next: since.unwrap_or(0),
        replay,
        closed,
        pending: VecDeque::new(),
        ended: false,
        gaps: log.metrics.gaps.clone(),
        _slot: Slot {
            _permit: permit,
            gauge: log.metrics.subscribers.clone(),
        },
    };
    let body = stream::unfold(state, |mut s| async move {
        let e = s.next_event().await?;
        Some((Ok::<Event, Infallible>(e), s))
    });
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// An open stream's subscriber slot: the permit and the gauge, given back on drop.
struct Slot {
    _permit: OwnedSemaphorePermit,
    gauge: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// One open stream.
struct Stream {
    source: Source,
    /// This node's epoch (the `EPOCH` of every id).
    epoch: u64,
    me: NodeId,
    read: Vec<NamespaceKey>,
    /// The caller's own namespace (`None`: an open node, whose one namespace is everyone's).
    own: Option<Vec<NamespaceKey>>,
    /// The next position this stream expects.
    next: u64,
    /// A tenant's stream: the next position of its view it shows (views before it, asked
    /// for by a `since` ahead of the stream, are skipped).
    view_next: u64,
    replay: VecDeque<Item>,
    closed: watch::Receiver<bool>,
    pending: VecDeque<Event>,
    ended: bool,
    gaps: prometheus_client::metrics::counter::Counter,
    _slot: Slot,
}

impl Stream {
    /// The next SSE message; `None` ends the stream.
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.ended {
                return None;
            }
            let item = match self.replay.pop_front() {
                Some(i) => i,
                None => {
                    if *self.closed.borrow() {
                        return None;
                    }
                    tokio::select! {
                        r = self.source.recv() => match r {
                            Ok(i) => i,
                            Err(RecvError::Lagged(_)) => {
                                // Refill from the ring while it still holds the next batch.
                                let missed = self.source.buffered_from(self.next);
                                if missed.first().is_some_and(|i| i.pos == self.next) {
                                    self.replay = missed.into();
                                } else {
                                    self.gap();
                                }
                                continue;
                            }
                            Err(RecvError::Closed) => return None,
                        },
                        _ = self.closed.changed() => return None,
                    }
                }
            };
            if item.pos < self.next {
                continue;
            }
            if item.pos > self.next {
                self.gap();
                continue;
            }
            self.next = item.pos + 1;
            self.render(&item);
        }
    }

    /// Queues a `replay_gap` message and ends the stream after it.
    fn gap(&mut self) {
        self.gaps.inc();
        let (since, oldest) = match self.own {
            Some(_) => (self.view_next, self.source.oldest_view(&self.read)),
            None => (self.next, self.source.oldest()),
        };
        let data = json!({
            "node": self.me.to_string(),
            "epoch": self.epoch,
            "since": since,
            "oldest": oldest,
        });
        self.pending
            .push_back(Event::default().event("replay_gap").data(data.to_string()));
        self.ended = true;
    }

    /// Queues the messages of the events of `item` this caller may see.
    fn render(&mut self, item: &Item) {
        let cluster = matches!(self.source, Source::Cluster(..));
        // A tenant's positions: the stream's (`pos`) and the member's (`seq`), in its view.
        let (pos, seq) = match self.own {
            None => (item.pos, item.batch.seq),
            Some(_) => {
                let Some(pos) = views::view_seq(&item.batch.class, &item.counts, &self.read) else {
                    return;
                };
                if pos < self.view_next {
                    return;
                }
                self.view_next = pos + 1;
                let origin = item.origin_counts.as_deref().unwrap_or(&item.counts);
                let seq = views::view_seq(&item.batch.class, origin, &self.read);
                (pos, seq.unwrap_or(pos))
            }
        };
        let visible = item.batch.events.iter().filter(|e| match e.namespace() {
            None => true,
            Some(ns) => self.read.contains(ns),
        });
        let mut out: Vec<Event> = visible
            .map(|e| {
                let (name, mut data) = render(e, item.node, &item.batch, self.own.as_deref());
                data["seq"] = json!(seq);
                if cluster {
                    data["feed_seq"] = json!(pos);
                }
                Event::default().event(name).data(data.to_string())
            })
            .collect();
        if let Some(last) = out.pop() {
            out.push(last.id(format!("{}:{}", self.epoch, pos)));
        }
        self.pending.extend(out);
    }
}

#[cfg(test)]
mod tests;
