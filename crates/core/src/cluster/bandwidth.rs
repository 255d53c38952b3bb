//! [`BandwidthTable`]: the node-to-node bandwidths `POST /v1/route` prices fetches with.
//!
//! Each node measures what it receives: every block it fetches from a peer (a get that missed
//! locally, a replica it was asked to take) adds a sample `bytes · 8 / seconds` to an EWMA
//! ([`EWMA_ALPHA`]) for the link `peer → this node`. Peers report their own inbound links on
//! the control channel's `Usage` exchange; this table keeps the latest report of each peer
//! (and when it arrived), so any node can price any pair. A pair never measured has no entry:
//! the caller falls back to `route.default_bandwidth_gbps`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ids::NodeId;

/// Weight of a new sample in the moving average.
pub const EWMA_ALPHA: f64 = 0.25;
/// Shortest duration a sample is taken as (a fetch timed below it is rounded up).
const SAMPLE_SECONDS_MIN: f64 = 1e-6;

/// One measured link as peers exchange it: measured by its receiving node.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InboundLink {
    /// The sending node.
    pub from: u64,
    /// Moving average, Gbit/s.
    pub gbps: f64,
    /// Samples taken.
    pub samples: u64,
}

/// One link of the table, as `GET /v1/cluster` and `/metrics` show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkView {
    /// The sending node.
    pub from: NodeId,
    /// The receiving node (which measured it).
    pub to: NodeId,
    /// Moving average, Gbit/s.
    pub gbps: f64,
    /// Samples taken.
    pub samples: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Links into this node, by sender: (EWMA Gbit/s, samples).
    inbound: BTreeMap<NodeId, (f64, u64)>,
    /// The latest report of each peer: when it came and its inbound links.
    peers: BTreeMap<NodeId, (Instant, Vec<InboundLink>)>,
}

/// This node's measurements and its peers' reports.
#[derive(Debug)]
pub struct BandwidthTable {
    me: NodeId,
    inner: Mutex<Inner>,
}

impl BandwidthTable {
    /// An empty table of node `me`.
    pub fn new(me: NodeId) -> BandwidthTable {
        BandwidthTable {
            me,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a fetch of `bytes` from `from` that took `elapsed`.
    pub fn record(&self, from: NodeId, bytes: u64, elapsed: Duration) {
        if bytes == 0 || from == self.me {
            return;
        }
        let secs = elapsed.as_secs_f64().max(SAMPLE_SECONDS_MIN);
        let sample = bytes as f64 * 8.0 / secs / 1e9;
        let mut inner = self.lock();
        let e = inner.inbound.entry(from).or_insert((sample, 0));
        if e.1 > 0 {
            e.0 = EWMA_ALPHA * sample + (1.0 - EWMA_ALPHA) * e.0;
        }
        e.1 += 1;
    }

    /// This node's inbound links, as it reports them to peers.
    pub fn inbound(&self) -> Vec<InboundLink> {
        self.lock()
            .inbound
            .iter()
            .map(|(from, (gbps, samples))| InboundLink {
                from: from.0,
                gbps: *gbps,
                samples: *samples,
            })
            .collect()
    }

    /// Keeps `peer`'s latest report of its inbound links (malformed figures are dropped).
    pub fn update_peer(&self, peer: NodeId, links: Vec<InboundLink>, now: Instant) {
        if peer == self.me {
            return;
        }
        let links = links
            .into_iter()
            .filter(|l| l.gbps.is_finite() && l.gbps > 0.0 && l.samples > 0)
            .collect();
        self.lock().peers.insert(peer, (now, links));
    }

    /// Whether some live peer's report is missing or older than `max_age` at `now`.
    pub fn stale(&self, peers: &[NodeId], max_age: Duration, now: Instant) -> bool {
        let inner = self.lock();
        peers
            .iter()
            .filter(|p| **p != self.me)
            .any(|p| match inner.peers.get(p) {
                Some((at, _)) => now.saturating_duration_since(*at) > max_age,
                None => true,
            })
    }

    /// The measured Gbit/s of `from → to`, if any.
    pub fn gbps(&self, from: NodeId, to: NodeId) -> Option<f64> {
        let inner = self.lock();
        if to == self.me {
            return inner.inbound.get(&from).map(|(g, _)| *g);
        }
        inner
            .peers
            .get(&to)
            .and_then(|(_, links)| links.iter().find(|l| l.from == from.0).map(|l| l.gbps))
    }

    /// Every link known, sorted by (from, to).
    pub fn links(&self) -> Vec<LinkView> {
        let inner = self.lock();
        let mut out: Vec<LinkView> = inner
            .inbound
            .iter()
            .map(|(from, (gbps, samples))| LinkView {
                from: *from,
                to: self.me,
                gbps: *gbps,
                samples: *samples,
            })
            .collect();
        for (to, (_, links)) in &inner.peers {
            out.extend(links.iter().map(|l| LinkView {
                from: NodeId(l.from),
                to: *to,
                gbps: l.gbps,
                samples: l.samples,
            }));
        }
        out.sort_by_key(|l| (l.from, l.to));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_average_and_peer_reports_price_other_pairs() {
        let t = BandwidthTable::new(NodeId(2));
        assert_eq!(t.gbps(NodeId(1), NodeId(2)), None);
        // 1.25 GB in one second: 10 Gbit/s; then 20 Gbit/s.
        t.record(NodeId(1), 1_250_000_000, Duration::from_secs(1));
        assert_eq!(t.gbps(NodeId(1), NodeId(2)), Some(10.0));
        t.record(NodeId(1), 2_500_000_000, Duration::from_secs(1));
        let g = t.gbps(NodeId(1), NodeId(2)).unwrap();
        assert!((g - 12.5).abs() < 1e-9, "{g}");
        t.record(NodeId(2), 1, Duration::from_secs(1));
        assert_eq!(t.inbound().len(), 1, "a node never measures itself");

        let now = Instant::now();
        assert!(t.stale(&[NodeId(2), NodeId(3)], Duration::from_secs(1), now));
        t.update_peer(
            NodeId(3),
            vec![
                InboundLink {
                    from: 1,
                    gbps: 4.0,
                    samples: 2,
                },
                InboundLink {
                    from: 2,
                    gbps: f64::NAN,
                    samples: 1,
                },
            ],
            now,
        );
        assert!(!t.stale(&[NodeId(2), NodeId(3)], Duration::from_secs(1), now));
        assert!(t.stale(
            &[NodeId(3)],
            Duration::from_secs(1),
            now + Duration::from_secs(2)
        ));
        assert_eq!(t.gbps(NodeId(1), NodeId(3)), Some(4.0));
        assert_eq!(
            t.gbps(NodeId(2), NodeId(3)),
            None,
            "malformed figures dropped"
        );
        let links = t.links();
        assert_eq!(links.len(), 2);
        assert_eq!((links[0].from, links[0].to), (NodeId(1), NodeId(2)));
        assert_eq!(links[0].samples, 2);
        assert_eq!((links[1].from, links[1].to), (NodeId(1), NodeId(3)));
    }
}
