//! `GET /v1/events`: the node's KV events as Server-Sent Events.
//!
//! Each event of a batch is one SSE message: `event: epoch | stored | removed | node_down`
//! (`node_down`: a member's lease expired, `down` and `down_epoch` name it) and a JSON
//! `data` line carrying `node`, `epoch`, `seq` and `ts` (the batch's) and, for `stored`/`removed`,
//! `tier` and `blocks` (hex ids); the last message of a batch carries `id: EPOCH:SEQ`.
//! `?since=SEQ` replays the current epoch's batches from `SEQ` (410 `replay_gap` naming the
//! oldest still buffered when `SEQ` is older); without it a `Last-Event-ID: EPOCH:SEQ` resumes
//! after that batch (from the start of the current epoch when `EPOCH` is an earlier one).
//! Then the stream follows live. A stream that falls behind the live broadcast catches up from
//! the ring; one that falls further behind than the ring holds gets one `replay_gap` message
//! and ends. Every stream ends when the node shuts down.
//!
//! A tenant sees `stored`/`removed` only for namespaces its token may read (its own and the
//! shared ones), and every `epoch` and `node_down`. At most `events.max_sse_subscribers` streams are open at
//! once (503 `too_many_subscribers` beyond).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use kvfabric_store::NamespaceKey;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch, OwnedSemaphorePermit};

use crate::http::errors::ApiError;
use crate::http::AppState;
use kvfabric_core::events::{Batch, EventKind, EventLog, ReplayGap};

/// The header a reconnecting `EventSource` sends.
const LAST_EVENT_ID: &str = "last-event-id";

/// Where a stream starts.
fn start(app: &EventLog, headers: &HeaderMap, uri: &Uri) -> Result<Option<u64>, ApiError> {
    let mut since = None;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("since", v)) if since.is_none() => {
                let s = v.parse::<u64>().map_err(|_| {
                    ApiError::InvalidQuery(format!(
                        "since: expected a sequence number (0 to {}), found {:?}",
                        u64::MAX,
                        v.chars().take(40).collect::<String>()
                    ))
                })?;
                since = Some(s);
            }
            _ => {
                return Err(ApiError::InvalidQuery(format!(
                    "expected only `since=SEQ`, found {:?}",
                    pair.chars().take(40).collect::<String>()
                )))
            }
        }
    }
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
    let (epoch, seq) = v
        .to_str()
        .ok()
        .and_then(|s| s.split_once(':'))
        .and_then(|(e, s)| Some((e.parse::<u64>().ok()?, s.parse::<u64>().ok()?)))
        .ok_or_else(invalid)?;
    match epoch.cmp(&app.epoch()) {
        std::cmp::Ordering::Less => Ok(Some(0)),
        std::cmp::Ordering::Equal => Ok(Some(seq.saturating_add(1))),
        std::cmp::Ordering::Greater => Err(ApiError::InvalidHeader {
            name: "Last-Event-ID",
            reason: format!("epoch {epoch} is newer than this node's ({})", app.epoch()),
        }),
    }
}

/// `GET /v1/events`.
pub(crate) async fn events(
    State(app): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let read = app.tenancy.caller(&headers)?.read(&headers)?;
    stream_events(&app, &headers, &uri, read)
}

/// A stream of the events of namespaces `read` (every `epoch` and `node_down` too), from
/// where `headers` and `uri` say.
pub(super) fn stream_events(
    app: &AppState,
    headers: &HeaderMap,
    uri: &Uri,
    read: Vec<NamespaceKey>,
) -> Result<Response, ApiError> {
    let log = app.events.clone();
    let since = start(&log, headers, uri)?;
    let Ok(permit) = app.sse_slots.clone().try_acquire_owned() else {
        log.metrics.refused.inc();
        return Err(ApiError::TooManySubscribers(app.sse_max));
    };
    let sub = match log.subscribe(since) {
        Ok(s) => s,
        Err(ReplayGap { oldest }) => {
            log.metrics.gaps.inc();
            return Err(ApiError::ReplayGap {
                since: since.unwrap_or(0),
                oldest,
                epoch: log.epoch(),
            });
        }
    };
    if since.is_some() {
        log.metrics.replays.inc();
    }
    log.metrics.subscribers.inc();
    let state = Stream {
        log,
        read,
        next: sub.next,
        replay: sub.replay.into(),
        live: sub.live,
        closed: sub.closed,
        pending: VecDeque::new(),
        ended: false,
        _slot: Slot {
            _permit: permit,
            gauge: app.events.metrics.subscribers.clone(),
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
    log: Arc<EventLog>,
    read: Vec<NamespaceKey>,
    /// The next sequence number this stream expects.
    next: u64,
    replay: VecDeque<Arc<Batch>>,
    live: broadcast::Receiver<Arc<Batch>>,
    closed: watch::Receiver<bool>,
    pending: VecDeque<Event>,
    ended: bool,
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
            let batch = match self.replay.pop_front() {
                Some(b) => b,
                None => {
                    if *self.closed.borrow() {
                        return None;
                    }
                    tokio::select! {
                        r = self.live.recv() => match r {
                            Ok(b) => b,
                            Err(RecvError::Lagged(_)) => {
                                // Refill from the ring while it still holds the next batch.
                                let missed = self.log.buffered_from(self.next);
                                if missed.first().is_some_and(|b| b.seq == self.next) {
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
            if batch.seq < self.next {
                continue;
            }
            if batch.seq > self.next {
                self.gap();
                continue;
            }
            self.next = batch.seq + 1;
            self.render(&batch);
        }
    }

    /// Queues a `replay_gap` message and ends the stream after it.
    fn gap(&mut self) {
        self.log.metrics.gaps.inc();
        let data = json!({
            "node": self.log.node().to_string(),
            "epoch": self.log.epoch(),
            "since": self.next,
            "oldest": self.log.buffered_from(0).first().map_or(self.log.next_seq(), |b| b.seq),
        });
        self.pending
            .push_back(Event::default().event("replay_gap").data(data.to_string()));
        self.ended = true;
    }

    /// Queues the messages of the events of `batch` this caller may see.
    fn render(&mut self, batch: &Batch) {
        let node = self.log.node().to_string();
        let visible = batch.events.iter().filter(|e| match e.namespace() {
            None => true,
            Some(ns) => self.read.contains(ns),
        });
        let mut out: Vec<Event> = visible
            .map(|e| {
                let (name, data) = match e {
                    EventKind::Epoch => (
                        "epoch",
                        json!({"node": node, "epoch": batch.epoch, "seq": batch.seq, "ts": batch.ts}),
                    ),
                    EventKind::Stored {
                        tier,
                        ids,
                        chunk_key,
                        block_tokens,
                        ..
                    } => (
                        "stored",
                        json!({
                            "node": node, "epoch": batch.epoch, "seq": batch.seq, "ts": batch.ts,
                            "tier": tier.name(),
                            "blocks": ids.iter().map(|i| i.to_hex()).collect::<Vec<_>>(),
                            "chunk_key": chunk_key.map(|k| k.to_hex()),
                            "block_tokens": block_tokens,
                        }),
                    ),
                    EventKind::NodeDown { node: down, epoch } => (
                        "node_down",
                        json!({
                            "node": node, "epoch": batch.epoch, "seq": batch.seq, "ts": batch.ts,
                            "down": down.to_string(), "down_epoch": epoch,
                        }),
                    ),
                    EventKind::Removed { tier, ids, .. } => (
                        "removed",
                        json!({
                            "node": node, "epoch": batch.epoch, "seq": batch.seq, "ts": batch.ts,
                            "tier": tier.map(|t| t.name()),
                            "blocks": ids.iter().map(|i| i.to_hex()).collect::<Vec<_>>(),
                        }),
                    ),
                };
                Event::default().event(name).data(data.to_string())
            })
            .collect();
        if let Some(last) = out.pop() {
            out.push(last.id(format!("{}:{}", batch.epoch, batch.seq)));
        }
        self.pending.extend(out);
    }
}

#[cfg(test)]
mod tests {
    use kvfabric_store::{BlockId, Tier};
    use tokio::sync::Semaphore;

    use super::*;
    use kvfabric_core::events::EventMetrics;
    use kvfabric_core::NodeId;

    fn stream(log: &Arc<EventLog>, read: Vec<NamespaceKey>, since: u64) -> Stream {
        let sub = log.subscribe(Some(since)).unwrap();
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        log.metrics.subscribers.inc();
        Stream {
            log: log.clone(),
            read,
            next: since,
            replay: sub.replay.into(),
            live: sub.live,
            closed: sub.closed,
            pending: VecDeque::new(),
            ended: false,
            _slot: Slot {
                _permit: permit,
                gauge: log.metrics.subscribers.clone(),
            },
        }
    }

    fn stored(ns: &str, n: u8) -> EventKind {
        EventKind::Stored {
            namespace: NamespaceKey::derive(ns),
            tier: Tier::Host,
            ids: vec![BlockId([n; 32])],
            chunk_key: None,
            block_tokens: 0,
        }
    }

    /// The SSE text of one message.
    async fn text(e: Event) -> String {
        let body = Sse::new(stream::iter([Ok::<_, Infallible>(e)])).into_response();
        let bytes = axum::body::to_bytes(body.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_stream_lagging_beyond_the_ring_gets_one_replay_gap_and_ends() {
        let log = Arc::new(EventLog::new(NodeId(1), 3, 2, EventMetrics::default()));
        log.publish(vec![EventKind::Epoch]);
        let mut s = stream(&log, vec![NamespaceKey::derive("a")], 0);
        assert_eq!(log.metrics.subscribers.get(), 1);
        // The replayed epoch, then five more batches into a ring (and broadcast) of two.
        for i in 0..5 {
            log.publish(vec![stored("a", i)]);
        }
        let first = text(s.next_event().await.unwrap()).await;
        assert!(
            first.contains("event: epoch") && first.contains("id: 3:0"),
            "{first}"
        );
        let gap = text(s.next_event().await.unwrap()).await;
        assert!(gap.contains("event: replay_gap"), "{gap}");
        assert!(
            gap.contains("\"since\":1") && gap.contains("\"oldest\":4"),
            "{gap}"
        );
        assert!(
            s.next_event().await.is_none(),
            "the stream ends after the gap"
        );
        assert_eq!(log.metrics.gaps.get(), 1);
        drop(s);
        assert_eq!(log.metrics.subscribers.get(), 0);
    }

    #[tokio::test]
    async fn a_stream_behind_the_broadcast_but_within_the_ring_catches_up_without_a_gap() {
        let n = kvfabric_core::events::BROADCAST_MAX as u64 + 500;
        let log = Arc::new(EventLog::new(
            NodeId(1),
            1,
            n as usize + 10,
            EventMetrics::default(),
        ));
        log.publish(vec![EventKind::Epoch]);
        let mut s = stream(&log, vec![NamespaceKey::derive("a")], 0);
        for i in 0..n {
            log.publish(vec![stored("a", (i % 251) as u8)]);
        }
        for seq in 0..=n {
            let e = text(s.next_event().await.unwrap()).await;
            assert!(e.contains(&format!("id: 1:{seq}\n")), "{seq}: {e}");
        }
        assert_eq!(log.metrics.gaps.get(), 0);
    }

    #[tokio::test]
    async fn only_readable_namespaces_are_rendered_and_the_batch_id_goes_last() {
        let log = Arc::new(EventLog::new(NodeId(1), 1, 8, EventMetrics::default()));
        log.publish(vec![stored("a", 1), stored("b", 2), stored("a", 3)]);
        log.publish(vec![stored("b", 4)]);
        log.publish(vec![stored("a", 5)]);
        let mut s = stream(&log, vec![NamespaceKey::derive("a")], 0);
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(text(s.next_event().await.unwrap()).await);
        }
        assert!(got[0].contains(&BlockId([1; 32]).to_hex()) && !got[0].contains("id:"));
        assert!(got[1].contains(&BlockId([3; 32]).to_hex()) && got[1].contains("id: 1:0"));
        // Batch 1 holds nothing readable: skipped; batch 2 follows.
        assert!(got[2].contains(&BlockId([5; 32]).to_hex()) && got[2].contains("id: 1:2"));
        log.close();
        assert!(
            s.next_event().await.is_none(),
            "a closed log ends the stream"
        );
    }
}
