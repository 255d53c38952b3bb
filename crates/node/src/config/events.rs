//! `[events]`: the KV event stream (`GET /v1/events` and the ZeroMQ publisher).
//!
//! ```toml
//! [events]                             # optional, every key optional
//! zmq_pub = "tcp://127.0.0.1:5557"     # vLLM-compatible ZeroMQ PUB socket (bound); off when
//!                                      # absent. tcp://IP:PORT only (port 0: any free port,
//!                                      # logged); unauthenticated: keep it on loopback or a
//!                                      # trusted network
//! zmq_replay = "tcp://127.0.0.1:5558"  # ROUTER socket answering replay requests; off when
//!                                      # absent; needs zmq_pub
//! ring_batches = 10000                 # batches kept for replay (1 to 1000000)
//! max_sse_subscribers = 64             # open GET /v1/events streams (503 beyond; 1 to 4096)
//! topic = "kvfabric.n1"                # first frame of every PUB message; default
//!                                      # "kvfabric.n<id>"; at most 256 bytes
//! cluster_feed = false                 # run the cluster feed (every member's events in one
//!                                      # stream: GET /v1/events?scope=cluster); implied by
//!                                      # cluster_zmq_pub
//! cluster_zmq_pub = "tcp://127.0.0.1:5567"    # the cluster feed's PUB socket (each message
//!                                             # under its member's topic `kvfabric.n<id>`)
//! cluster_zmq_replay = "tcp://127.0.0.1:5568" # its ROUTER: replay of one member's stream
//! ```

use std::net::SocketAddr;

use kvfabric_store::ConfigError;

use super::raw::RawEvents;
use super::validate::Check;
use kvfabric_core::NodeId;

/// Default batches kept for replay.
pub(crate) const RING_BATCHES_DEFAULT: u64 = 10_000;
/// Most batches kept for replay.
pub(crate) const RING_BATCHES_MAX: u64 = 1_000_000;
/// Default open SSE streams.
pub(crate) const SSE_SUBSCRIBERS_DEFAULT: u32 = 64;
/// Most open SSE streams.
pub(crate) const SSE_SUBSCRIBERS_MAX: u32 = 4096;
/// Longest topic, in bytes.
pub(crate) const TOPIC_BYTES_MAX: usize = 256;

/// The validated `[events]` section.
#[derive(Debug, Clone)]
pub(crate) struct EventsConfig {
    /// The PUB socket's endpoint (`tcp://IP:PORT`), if any.
    pub(crate) zmq_pub: Option<String>,
    /// The replay ROUTER socket's endpoint, if any.
    pub(crate) zmq_replay: Option<String>,
    /// Batches kept for replay.
    pub(crate) ring_batches: usize,
    /// Open SSE streams at most.
    pub(crate) max_sse_subscribers: u32,
    /// The PUB topic frame.
    pub(crate) topic: String,
    /// Whether this node runs the cluster feed.
    pub(crate) cluster_feed: bool,
    /// The cluster feed's PUB endpoint, if any.
    pub(crate) cluster_zmq_pub: Option<String>,
    /// The cluster feed's replay endpoint, if any.
    pub(crate) cluster_zmq_replay: Option<String>,
}

/// The topic of member `node`'s messages on the cluster feed's socket.
pub(crate) fn member_topic(node: NodeId) -> String {
    format!("kvfabric.{node}")
}

impl Check<'_> {
    /// Validates `[events]` for node `me`.
    pub(crate) fn events(&self, me: NodeId, raw: RawEvents) -> Result<EventsConfig, ConfigError> {
        let zmq_pub = raw
            .zmq_pub
            .map(|e| self.zmq_endpoint("events.zmq_pub", e))
            .transpose()?;
        let zmq_replay = raw
            .zmq_replay
            .map(|e| self.zmq_endpoint("events.zmq_replay", e))
            .transpose()?;
        if zmq_replay.is_some() && zmq_pub.is_none() {
            return Err(self.err(
                "events.zmq_replay",
                "a replay socket needs the publisher: set events.zmq_pub too",
            ));
        }
        if let (Some(p), Some(r)) = (&zmq_pub, &zmq_replay) {
            if p == r && !p.ends_with(":0") {
                return Err(self.err(
                    "events.zmq_replay",
                    format!("expected another endpoint than events.zmq_pub, found {r:?} twice"),
                ));
            }
        }
        let ring_batches = raw.ring_batches.unwrap_or(RING_BATCHES_DEFAULT);
        if !(1..=RING_BATCHES_MAX).contains(&ring_batches) {
            return Err(self.err(
                "events.ring_batches",
                format!("expected 1 to {RING_BATCHES_MAX}, found {ring_batches}"),
            ));
        }
        let max_sse_subscribers = raw.max_sse_subscribers.unwrap_or(SSE_SUBSCRIBERS_DEFAULT);
        if !(1..=SSE_SUBSCRIBERS_MAX).contains(&max_sse_subscribers) {
            return Err(self.err(
                "events.max_sse_subscribers",
                format!("expected 1 to {SSE_SUBSCRIBERS_MAX}, found {max_sse_subscribers}"),
            ));
        }
        let topic = raw.topic.unwrap_or_else(|| format!("kvfabric.{me}"));
        if topic.len() > TOPIC_BYTES_MAX {
            return Err(self.err(
                "events.topic",
                format!(
                    "expected at most {TOPIC_BYTES_MAX} bytes, found {}",
                    topic.len()
                ),
            ));
        }
        let cluster_zmq_pub = raw
            .cluster_zmq_pub
            .map(|e| self.zmq_endpoint("events.cluster_zmq_pub", e))
            .transpose()?;
        let cluster_zmq_replay = raw
            .cluster_zmq_replay
            .map(|e| self.zmq_endpoint("events.cluster_zmq_replay", e))
            .transpose()?;
        if cluster_zmq_replay.is_some() && cluster_zmq_pub.is_none() {
            return Err(self.err(
                "events.cluster_zmq_replay",
                "a replay socket needs the publisher: set events.cluster_zmq_pub too",
            ));
        }
        let explicit = |e: &Option<String>| e.as_ref().filter(|e| !e.ends_with(":0")).cloned();
        let mut endpoints: Vec<String> =
            [&zmq_pub, &zmq_replay, &cluster_zmq_pub, &cluster_zmq_replay]
                .into_iter()
                .filter_map(explicit)
                .collect();
        endpoints.sort();
        if let Some(w) = endpoints.windows(2).find(|w| w[0] == w[1]) {
            return Err(self.err(
                "events.cluster_zmq_pub",
                format!(
                    "expected distinct endpoints for the four sockets, found {:?} twice",
                    w[0]
                ),
            ));
        }
        let cluster_feed = raw.cluster_feed.unwrap_or(false) || cluster_zmq_pub.is_some();
        if raw.cluster_feed == Some(false) && cluster_zmq_pub.is_some() {
            return Err(self.err(
                "events.cluster_feed",
                "events.cluster_zmq_pub publishes the cluster feed: it cannot be false",
            ));
        }
        Ok(EventsConfig {
            zmq_pub,
            zmq_replay,
            ring_batches: ring_batches as usize,
            max_sse_subscribers,
            topic,
            cluster_feed,
            cluster_zmq_pub,
            cluster_zmq_replay,
        })
    }

    /// `tcp://IP:PORT`.
    fn zmq_endpoint(&self, key: &str, e: String) -> Result<String, ConfigError> {
        let ok = e
            .strip_prefix("tcp://")
            .is_some_and(|a| a.parse::<SocketAddr>().is_ok());
        if !ok {
            return Err(self.err(
                key,
                format!(
                    "expected tcp://IP:PORT (e.g. tcp://127.0.0.1:5557), found {:?}",
                    e.chars().take(80).collect::<String>()
                ),
            ));
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn check(text: &str) -> Result<EventsConfig, ConfigError> {
        let raw: RawEvents = toml::from_str(text).unwrap();
        Check {
            file: "node.toml",
            base: Path::new(""),
        }
        .events(NodeId(3), raw)
    }

    #[test]
    fn defaults_are_off_and_bounded() {
        let c = check("").unwrap();
        assert_eq!(c.zmq_pub, None);
        assert_eq!(c.zmq_replay, None);
        assert_eq!(c.ring_batches, RING_BATCHES_DEFAULT as usize);
        assert_eq!(c.max_sse_subscribers, SSE_SUBSCRIBERS_DEFAULT);
        assert_eq!(c.topic, "kvfabric.n3");
        assert!(!c.cluster_feed);
        let c = check("cluster_zmq_pub = \"tcp://127.0.0.1:0\"").unwrap();
        assert!(c.cluster_feed, "the cluster socket implies the feed");
        assert_eq!(member_topic(NodeId(2)), "kvfabric.n2");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("zmq_pub = \"127.0.0.1:5557\"", "events.zmq_pub"),
            ("zmq_pub = \"tcp://*:5557\"", "events.zmq_pub"),
            ("zmq_replay = \"tcp://127.0.0.1:5558\"", "events.zmq_replay"),
            (
                "zmq_pub = \"tcp://127.0.0.1:5557\"\nzmq_replay = \"tcp://127.0.0.1:5557\"",
                "events.zmq_replay",
            ),
            ("ring_batches = 0", "events.ring_batches"),
            ("ring_batches = 1000001", "events.ring_batches"),
            ("max_sse_subscribers = 0", "events.max_sse_subscribers"),
            ("max_sse_subscribers = 5000", "events.max_sse_subscribers"),
            ("cluster_zmq_pub = \"tcp://*:1\"", "events.cluster_zmq_pub"),
            (
                "cluster_zmq_replay = \"tcp://127.0.0.1:5568\"",
                "events.cluster_zmq_replay",
            ),
            (
                "zmq_pub = \"tcp://127.0.0.1:5557\"\ncluster_zmq_pub = \"tcp://127.0.0.1:5557\"",
                "events.cluster_zmq_pub",
            ),
            (
                "cluster_feed = false\ncluster_zmq_pub = \"tcp://127.0.0.1:5567\"",
                "events.cluster_feed",
            ),
        ];
        for (text, key) in cases {
            let e = check(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
            assert_eq!(e.file, "node.toml");
            assert!(!e.reason.is_empty());
        }
        let long = format!("topic = \"{}\"", "x".repeat(300));
        assert_eq!(check(&long).unwrap_err().key, "events.topic");
    }
}
