//! The node's metrics: one `prometheus-client` [`Registry`] per node (no global statics),
//! every series labelled `node="n<id>"`, exposed at `GET /metrics` in the OpenMetrics text
//! format.
//!
//! Counted by the HTTP layer: requests by route, method and status; rejected requests by
//! reason (the error code); block hits by tier and misses; payload bytes in and out; puts by
//! dedup outcome. Mirrored from the store at each scrape (its counters are cumulative values it
//! owns; the difference since the last scrape is added): verify failures, dedup collisions,
//! evictions, demotions, promotions, quarantined disk entries, blocks recovered at open. Gauges
//! are set at each scrape: tier capacity, use and blocks, held blocks, chunk keys.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `kvfabric_http_requests_total` | counter | route, method, status |
//! | `kvfabric_rejected_requests_total` | counter | reason |
//! | `kvfabric_inflight_requests` | gauge | |
//! | `kvfabric_block_hits_total` | counter | tier |
//! | `kvfabric_block_misses_total` | counter | |
//! | `kvfabric_bytes_in_total`, `kvfabric_bytes_out_total` | counter | |
//! | `kvfabric_puts_total` | counter | dedup |
//! | `kvfabric_verify_failures_total`, `kvfabric_dedup_collisions_total` | counter | |
//! | `kvfabric_evictions_total`, `kvfabric_demotions_total`, `kvfabric_promotions_total` | counter | |
//! | `kvfabric_quarantined_total`, `kvfabric_recovered_blocks_total` | counter | |
//! | `kvfabric_recovered_orphaned_total` | counter | | (blocks found at open under a namespace key the node no longer has: released, never served)
//! | `kvfabric_tier_capacity_bytes`, `kvfabric_tier_used_bytes`, `kvfabric_tier_blocks` | gauge | tier |
//! | `kvfabric_held_blocks`, `kvfabric_chunk_keys` | gauge | |
//! | `kvfabric_arenas`, `kvfabric_arena_bytes` | gauge | | (live per-request arenas, the bytes they hold)
//! | `kvfabric_runtime` | gauge | stat: `workers` (the async runtime's worker threads, `[node] worker_threads`), `alive_tasks`, `global_queue_depth` (tasks waiting for a worker) |
//! | `kvfabric_raft_state` | gauge | stat: `term`, `is_leader`, `last_applied`, `last_log`, `epoch`, `members_healthy`, `members`, `rpc_ok`, `rpc_failed`, `rpc_abandoned`, `rpc_served`, `prompt_elections`, `prevotes_refused`, `preappend_accepted`, `preappend_refused`, `preappend_failed`, `preappend_dropped`, `preappend_elided` (cluster nodes) |
//! | `kvfabric_transport` | gauge | stat: the block transport's counters, e.g. `fetches_ok`, `verify_failures`, `bytes_in` (cluster nodes) |
//! | `kvfabric_tier_moves` | gauge | stat: `recorded` (in the directory), `failed`, `before_join`, `lost_released` (copies that failed verification, their owner records released) (cluster nodes) |
//! | `kvfabric_scrub` | gauge | stat: `passes`, `verified` (disk copies read back that hash to their ids), `bytes` (of those), `lost` (that did not: quarantined, forgotten), `errors` (reads that failed otherwise) |
//! | `kvfabric_peer_health` | gauge | stat: `suspects` (members suspected now), `suspected` (times a member became a suspect), `cleared` (times a suspect answered again), `probes` (probes sent to suspects) (cluster nodes) |
//! | `kvfabric_repair` | gauge | stat: `passes`, `under_replicated` (held blocks, last pass), `copies_made`, `copies_missing` (cluster nodes) |
//! | `kvfabric_engine_offers` | gauge | stat: `sent` (engine identities offered to a peer ahead of a push, kept by it), `failed` (not kept), `used` (pushed copies installed here under an offered identity) (cluster nodes) |
//! | `kvfabric_events_*`, `kvfabric_event_*` | counter, gauge | the event log's (see `events::metrics`) |
//! | `kvfabric_route_requests_total` | counter | |
//! | `kvfabric_route_refused_total` | counter | reason (the error code) |
//! | `kvfabric_link_gbps`, `kvfabric_link_samples` | gauge | from, to: measured node-to-node bandwidth (EWMA, Gbit/s) and its samples (cluster nodes) |

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use kvfabric_core::cluster::view::ClusterMetrics;
use kvfabric_core::local::Snapshot;
use kvfabric_core::NodeId;

/// Labels of a cluster figure.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StatLabels {
    /// Which figure.
    pub(crate) stat: &'static str,
}

/// Labels of a request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// Route template (a fixed set, see `track::route_label`).
    pub(crate) route: &'static str,
    /// Method (GET, HEAD, PUT, POST, DELETE or other).
    pub(crate) method: &'static str,
    /// Status code.
    pub(crate) status: u16,
}

/// Labels of a rejected request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    /// The error code.
    pub(crate) reason: &'static str,
}

/// Labels naming a tier.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TierLabels {
    /// `gpu`, `host` or `disk`.
    pub(crate) tier: &'static str,
}

/// Labels naming a dedup outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DedupLabels {
    /// `new`, `shared` or `collision`.
    pub(crate) dedup: &'static str,
}

/// Labels of a measured link.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LinkLabels {
    /// The sending node.
    pub(crate) from: String,
    /// The receiving node (which measured it).
    pub(crate) to: String,
}

/// The store's cumulative counters, mirrored.
#[derive(Default)]
struct StoreMirror {
    verify_failures: Counter,
    dedup_collisions: Counter,
    evictions: Counter,
    demotions: Counter,
    promotions: Counter,
    quarantined: Counter,
    recovered: Counter,
    /// The values last added, to add only the difference.
    last: Mutex<[u64; 7]>,
}

/// Every metric of one node.
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) rejected: Family<ReasonLabels, Counter>,
    pub(crate) inflight: Gauge,
    pub(crate) hits: Family<TierLabels, Counter>,
    pub(crate) misses: Counter,
    /// Blocks found at open under a namespace key the node does not have.
    pub(crate) orphaned: Counter,
    pub(crate) bytes_in: Counter,
    pub(crate) bytes_out: Counter,
    pub(crate) puts: Family<DedupLabels, Counter>,
    store: StoreMirror,
    tier_capacity: Family<TierLabels, Gauge>,
    tier_used: Family<TierLabels, Gauge>,
    tier_blocks: Family<TierLabels, Gauge>,
    held_blocks: Gauge,
    chunk_keys: Gauge,
    arenas: Gauge,
    arena_bytes: Gauge,
    runtime: Family<StatLabels, Gauge>,
    raft: Family<StatLabels, Gauge>,
    transport: Family<StatLabels, Gauge>,
    repair: Family<StatLabels, Gauge>,
    engine_offers: Family<StatLabels, Gauge>,
    peer_health: Family<StatLabels, Gauge>,
    tier_moves: Family<StatLabels, Gauge>,
    scrub: Family<StatLabels, Gauge>,
    /// The event log's series (`crate::events`).
    pub(crate) events: kvfabric_core::events::EventMetrics,
    pub(crate) route_requests: Counter,
    pub(crate) route_refused: Family<ReasonLabels, Counter>,
    link_gbps: Family<LinkLabels, Gauge<f64, AtomicU64>>,
    link_samples: Family<LinkLabels, Gauge>,
}

impl Metrics {
    /// A fresh registry for node `node`.
    pub(crate) fn new(node: NodeId) -> Metrics {
        let labels = [(Cow::Borrowed("node"), Cow::Owned(node.to_string()))];
        let mut r = Registry::with_prefix_and_labels("kvfabric", labels.into_iter());
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            rejected: Family::default(),
            inflight: Gauge::default(),
            hits: Family::default(),
            misses: Counter::default(),
            orphaned: Counter::default(),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            puts: Family::default(),
            store: StoreMirror::default(),
            tier_capacity: Family::default(),
            tier_used: Family::default(),
            tier_blocks: Family::default(),
            held_blocks: Gauge::default(),
            chunk_keys: Gauge::default(),
            arenas: Gauge::default(),
            arena_bytes: Gauge::default(),
            runtime: Family::default(),
            raft: Family::default(),
            transport: Family::default(),
            repair: Family::default(),
            engine_offers: Family::default(),
            peer_health: Family::default(),
            tier_moves: Family::default(),
            scrub: Family::default(),
            events: kvfabric_core::events::EventMetrics::default(),
            route_requests: Counter::default(),
            route_refused: Family::default(),
            link_gbps: Family::default(),
            link_samples: Family::default(),
        };
        m.events.register(&mut r);
        r.register(
            "http_requests",
            "HTTP requests by route, method and status",
            m.requests.clone(),
        );
        r.register(
            "rejected_requests",
            "Requests refused, by error code",
            m.rejected.clone(),
        );
        r.register(
            "inflight_requests",
            "Requests being handled",
            m.inflight.clone(),
        );
        r.register("block_hits", "Block reads served, by tier", m.hits.clone());
        r.register(
            "block_misses",
            "Block reads of ids not held",
            m.misses.clone(),
        );
        r.register(
            "bytes_in",
            "Payload bytes received by puts",
            m.bytes_in.clone(),
        );
        r.register(
            "bytes_out",
            "Payload bytes served by reads",
            m.bytes_out.clone(),
        );
        r.register("puts", "Puts sealed, by dedup outcome", m.puts.clone());
        let s = &m.store;
        r.register(
            "verify_failures",
            "Tier reads whose bytes did not match their id (never served)",
            s.verify_failures.clone(),
        );
        r.register(
            "dedup_collisions",
            "Seals whose id matched stored bytes that differ (a security signal)",
            s.dedup_collisions.clone(),
        );
        r.register(
            "evictions",
            "Unreferenced blocks dropped from the last tier",
            s.evictions.clone(),
        );
        r.register(
            "demotions",
            "Blocks moved to a slower tier",
            s.demotions.clone(),
        );
        r.register(
            "promotions",
            "Blocks moved to a faster tier on a hit",
            s.promotions.clone(),
        );
        r.register(
            "quarantined",
            "Disk entries quarantined (bytes did not match their id)",
            s.quarantined.clone(),
        );
        r.register(
            "recovered_blocks",
            "Blocks recovered from disk at open",
            s.recovered.clone(),
        );
        r.register(
            "recovered_orphaned",
            "Blocks found on disk at open under a namespace key this node does not have (a retired secret, a removed namespace): released, never served",
            m.orphaned.clone(),
        );
        r.register(
            "tier_capacity_bytes",
            "Bytes a tier may hold",
            m.tier_capacity.clone(),
        );
        r.register("tier_used_bytes", "Bytes a tier holds", m.tier_used.clone());
        r.register("tier_blocks", "Blocks a tier holds", m.tier_blocks.clone());
        r.register(
            "held_blocks",
            "Blocks this node holds a reference on",
            m.held_blocks.clone(),
        );
        r.register(
            "chunk_keys",
            "Chunk keys known to this node",
            m.chunk_keys.clone(),
        );
        r.register(
            "arenas",
            "Per-request arenas live on this node",
            m.arenas.clone(),
        );
        r.register(
            "arena_bytes",
            "Bytes the live per-request arenas hold",
            m.arena_bytes.clone(),
        );
        r.register(
            "raft_state",
            "The directory member's Raft state and RPC counts",
            m.raft.clone(),
        );
        r.register(
            "transport",
            "The block transport's counters",
            m.transport.clone(),
        );
        r.register(
            "runtime",
            "The node's async runtime: worker threads, live tasks, tasks waiting for a worker",
            m.runtime.clone(),
        );
        r.register(
            "repair",
            "Re-replication of blocks with fewer live copies than the replication factor",
            m.repair.clone(),
        );
        r.register(
            "engine_offers",
            "Engine identities offered ahead of pushes (a pushed copy's events carry the identity its block was put with)",
            m.engine_offers.clone(),
        );
        r.register(
            "peer_health",
            "Members this node suspects dead from its own exchanges, and their probes",
            m.peer_health.clone(),
        );
        r.register(
            "tier_moves",
            "Tier moves of held blocks recorded in the directory",
            m.tier_moves.clone(),
        );
        r.register(
            "scrub",
            "Background verification of the disk tier's held copies",
            m.scrub.clone(),
        );
        r.register(
            "route_requests",
            "POST /v1/route requests answered with a ranking",
            m.route_requests.clone(),
        );
        r.register(
            "route_refused",
            "POST /v1/route requests refused, by error code",
            m.route_refused.clone(),
        );
        r.register(
            "link_gbps",
            "Measured node-to-node bandwidth (EWMA of fetches, Gbit/s)",
            m.link_gbps.clone(),
        );
        r.register(
            "link_samples",
            "Fetches measured on a node-to-node link",
            m.link_samples.clone(),
        );
        Metrics { registry: r, ..m }
    }

    /// Sets the cluster figures (cluster nodes only; called before [`Metrics::encode`]).
    pub(crate) fn set_cluster(&self, c: &ClusterMetrics) {
        let raft = [
            ("term", c.term),
            ("is_leader", u64::from(c.is_leader)),
            ("last_applied", c.last_applied),
            ("last_log", c.last_log),
            ("epoch", c.epoch),
            ("members_healthy", c.members_healthy),
            ("members", c.members),
            ("rpc_ok", c.raft_calls_ok),
            ("rpc_failed", c.raft_calls_failed),
            ("rpc_abandoned", c.raft_calls_abandoned),
            ("rpc_served", c.raft_served),
            ("prompt_elections", c.prompt_elections),
            ("prevotes_refused", c.prevotes_refused),
            ("preappend_accepted", c.preappends[0]),
            ("preappend_refused", c.preappends[1]),
            ("preappend_failed", c.preappends[2]),
            ("preappend_dropped", c.preappends[3]),
            ("preappend_elided", c.preappends[4]),
        ];
        for (stat, v) in raft {
            self.raft.get_or_create(&StatLabels { stat }).set(gauge(v));
        }
        let t = &c.transport;
        let transport = [
            ("fetches_ok", t.fetches_ok),
            ("fetches_failed", t.fetches_failed),
            ("redials", t.redials),
            ("connections_set_aside", t.connections_set_aside),
            ("verify_failures", t.verify_failures),
            ("protocol_violations", t.protocol_violations),
            ("timeouts", t.timeouts),
            ("connections_opened", t.connections_opened),
            ("handshakes_refused", t.handshakes_refused),
            ("blocks_served", t.blocks_served),
            ("bytes_in", t.bytes_in),
            ("bytes_out", t.bytes_out),
            ("pushes_ok", t.pushes_ok),
            ("pushes_failed", t.pushes_failed),
            ("pushes_stored", t.pushes_stored),
            ("pushes_rejected", t.pushes_rejected),
            ("probes_ok", t.probes_ok),
            ("probes_failed", t.probes_failed),
            ("probes_served", t.probes_served),
            ("messages_ok", t.messages_ok),
            ("messages_failed", t.messages_failed),
            ("messages_served", t.messages_served),
        ];
        for (stat, v) in transport {
            self.transport
                .get_or_create(&StatLabels { stat })
                .set(gauge(v));
        }
        let names = [
            "passes",
            "under_replicated",
            "copies_made",
            "copies_missing",
        ];
        for (stat, v) in names.into_iter().zip(c.repair) {
            self.repair
                .get_or_create(&StatLabels { stat })
                .set(gauge(v));
        }
        for (stat, v) in ["sent", "failed", "used"].into_iter().zip(c.engine_offers) {
            self.engine_offers
                .get_or_create(&StatLabels { stat })
                .set(gauge(v));
        }
        let names = ["suspects", "suspected", "cleared", "probes"];
        for (stat, v) in names.into_iter().zip(c.health) {
            self.peer_health
                .get_or_create(&StatLabels { stat })
                .set(gauge(v));
        }
        let names = ["recorded", "failed", "before_join", "lost_released"];
        for (stat, v) in names.into_iter().zip(c.tier_moves) {
            self.tier_moves
                .get_or_create(&StatLabels { stat })
                .set(gauge(v));
        }
    }

    /// Sets the measured links (cluster nodes only; called before [`Metrics::encode`]).
    pub(crate) fn set_links(&self, links: &[kvfabric_core::cluster::bandwidth::LinkView]) {
        for l in links {
            let labels = LinkLabels {
                from: l.from.to_string(),
                to: l.to.to_string(),
            };
            self.link_gbps.get_or_create(&labels).set(l.gbps);
            self.link_samples
                .get_or_create(&labels)
                .set(gauge(l.samples));
        }
    }

    /// Sets the arena gauges: live arenas and the bytes they hold.
    pub(crate) fn set_arenas(&self, live: u64, bytes: u64) {
        self.arenas.set(gauge(live));
        self.arena_bytes.set(gauge(bytes));
    }

    /// Sets the runtime gauges from the async runtime the caller runs on.
    pub(crate) fn set_runtime(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let m = handle.metrics();
        let stats = [
            ("workers", m.num_workers()),
            ("alive_tasks", m.num_alive_tasks()),
            ("global_queue_depth", m.global_queue_depth()),
        ];
        for (stat, v) in stats {
            self.runtime
                .get_or_create(&StatLabels { stat })
                .set(gauge(v as u64));
        }
    }

    /// The OpenMetrics text of every series, store figures taken from `snapshot` (absent while
    /// the store opens).
    pub(crate) fn encode(&self, snapshot: Option<&Snapshot>) -> String {
        if let Some(s) = snapshot {
            self.mirror(s);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    fn mirror(&self, s: &Snapshot) {
        let c = &s.counters;
        let now = [
            c.verify_failures,
            c.dedup_collisions,
            c.evictions,
            c.demotions,
            c.promotions,
            c.disk.quarantined,
            c.recovered,
        ];
        let m = &self.store;
        let targets = [
            &m.verify_failures,
            &m.dedup_collisions,
            &m.evictions,
            &m.demotions,
            &m.promotions,
            &m.quarantined,
            &m.recovered,
        ];
        let mut last = m.last.lock().unwrap_or_else(|p| p.into_inner());
        for ((counter, now), last) in targets.iter().zip(now).zip(last.iter_mut()) {
            counter.inc_by(now.saturating_sub(*last));
            *last = now.max(*last);
        }
        drop(last);
        for u in &s.usage {
            let l = TierLabels {
                tier: u.tier.name(),
            };
            self.tier_capacity
                .get_or_create(&l)
                .set(gauge(u.capacity.0));
            self.tier_used.get_or_create(&l).set(gauge(u.used.0));
            self.tier_blocks.get_or_create(&l).set(gauge(u.blocks));
        }
        self.held_blocks.set(gauge(s.held));
        self.chunk_keys.set(gauge(s.chunk_keys));
        let names = ["passes", "verified", "bytes", "lost", "errors"];
        for (stat, v) in names.into_iter().zip(s.scrub) {
            self.scrub.get_or_create(&StatLabels { stat }).set(gauge(v));
        }
    }
}

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_store::{ByteCount, StoreCounters, Tier, TierUsage};

    #[test]
    fn runtime_gauges_name_the_workers_of_the_runtime_they_run_on() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .build()
            .unwrap();
        let m = Metrics::new(NodeId(7));
        m.set_runtime();
        assert!(
            !m.encode(None).contains("kvfabric_runtime{"),
            "outside a runtime nothing is set"
        );
        rt.block_on(async { m.set_runtime() });
        let text = m.encode(None);
        assert!(
            text.contains("kvfabric_runtime{node=\"n7\",stat=\"workers\"} 3"),
            "{text}"
        );
        assert!(text.contains("stat=\"alive_tasks\"}"), "{text}");
        assert!(text.contains("stat=\"global_queue_depth\"}"), "{text}");
    }

    #[test]
    fn store_counters_are_mirrored_by_difference() {
        let m = Metrics::new(NodeId(7));
        let mut s = Snapshot {
            counters: StoreCounters::default(),
            usage: vec![TierUsage {
                tier: Tier::Host,
                capacity: ByteCount(100),
                used: ByteCount(40),
                blocks: 2,
            }],
            held: 2,
            chunk_keys: 1,
            scrub: [0; 5],
        };
        s.counters.demotions = 3;
        m.encode(Some(&s));
        s.counters.demotions = 5;
        let text = m.encode(Some(&s));
        assert!(
            text.contains("kvfabric_demotions_total{node=\"n7\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("kvfabric_tier_used_bytes{node=\"n7\",tier=\"host\"} 40"),
            "{text}"
        );
        m.rejected
            .get_or_create(&ReasonLabels {
                reason: "not_found",
            })
            .inc();
        let text = m.encode(None);
        assert!(
            text.contains("kvfabric_rejected_requests_total{node=\"n7\",reason=\"not_found\"} 1"),
            "{text}"
        );
    }
}
