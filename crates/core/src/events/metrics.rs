//! [`EventMetrics`]: the event log's series, registered in the node's registry.
//!
//! | series | type |
//! |---|---|
//! | `kvfabric_events_published_total` | counter: batches published |
//! | `kvfabric_event_subscribers` | gauge: open `GET /v1/events` streams |
//! | `kvfabric_event_subscribers_refused_total` | counter: streams refused (503, at the bound) |
//! | `kvfabric_event_replays_total` | counter: replays served (SSE `since`/`Last-Event-ID`, ZeroMQ) |
//! | `kvfabric_event_replay_gaps_total` | counter: replays or streams that lost batches |
//! | `kvfabric_event_zmq_bad_requests_total` | counter: malformed ZeroMQ replay requests |

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Counters and gauges of the event log (clones share their values).
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    /// Batches published.
    pub published: Counter,
    /// Open SSE streams.
    pub subscribers: Gauge,
    /// SSE streams refused at the bound.
    pub refused: Counter,
    /// Replays served.
    pub replays: Counter,
    /// Replays or live streams that could not be served without a gap.
    pub gaps: Counter,
    /// Malformed ZeroMQ replay requests.
    pub zmq_bad_requests: Counter,
}

impl EventMetrics {
    /// Registers every series in `r` (the node's registry, prefix `kvfabric`).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "events_published",
            "KV event batches published",
            self.published.clone(),
        );
        r.register(
            "event_subscribers",
            "Open GET /v1/events streams",
            self.subscribers.clone(),
        );
        r.register(
            "event_subscribers_refused",
            "GET /v1/events streams refused at max_sse_subscribers",
            self.refused.clone(),
        );
        r.register(
            "event_replays",
            "Event replays served (SSE and ZeroMQ)",
            self.replays.clone(),
        );
        r.register(
            "event_replay_gaps",
            "Event replays or streams that lost batches",
            self.gaps.clone(),
        );
        r.register(
            "event_zmq_bad_requests",
            "Malformed ZeroMQ replay requests",
            self.zmq_bad_requests.clone(),
        );
    }
}
