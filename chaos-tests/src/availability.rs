//! Availability per fault kind: for every kind of fault injected, the puts and gets sent to
//! nodes the fault did not hit — how many succeeded and how long they took (p50, p99) —
//! while it was in force, and in the window after it was healed, with the thresholds a
//! single-node fault must meet.
//!
//! "Did not hit": a kill, wipe or pause stops one node; a partition cuts off its minority; an
//! asymmetric partition drops one direction out of one node; loss and delay touch every node,
//! so their operations all count. An operation counts for a fault when it was in flight at
//! any moment while the fault was in force (one sent just before a kill and held up by it
//! counts), and for the window after it when it began in the [`AFTER_MS`] after the heal and
//! ended before the next fault began (one still running then is the next fault's). What
//! counts as success: a put acknowledged (201), a get of an acknowledged block answered 200
//! with the right bytes. Latency is each operation's, its failures included (an unanswered
//! one at the client's bound).
//!
//! The only operations left out besides those sent to a node the fault hit: gets that failed
//! while no holder of their block could serve it — every node that acknowledged holding it
//! lies (`--lying-peer`), is hit by the fault, or lost its copy to an earlier kill (the
//! checker's rule for lost blocks). They are counted ([`Window::gets_left_out`]) and the
//! report prints the count. A get answered with the right bytes always counts.
//!
//! Thresholds: a fault that takes one node out (kill, kill + wipe, pause, the leader
//! isolated, a corrupted disk, and a majority / minority split whose minority is one node)
//! must leave at least 99% of the puts and of the gets to the other nodes succeeding, with
//! p99 at most 1.5 s, during the fault and after it. Each kind is judged once, over all its
//! faults' windows pooled, however few operations they hold (with fewer than 100 the p99 is
//! the slowest operation and a single failure is more than 1%: the judgement is strict, not
//! skipped); a judged window with no operation at all is a shortfall (nothing shows the
//! fabric served).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Outcome;
use crate::history::{Fault, FaultKind, Recorded, Request};

/// Least success rate a single-node fault must keep, puts and gets alike.
pub const SUCCESS_MIN: f64 = 0.99;
/// Highest p99 latency a single-node fault may cause.
pub const P99_MS_MAX: f64 = 1_500.0;
/// How long after a heal counts as "after".
pub const AFTER_MS: f64 = 5_000.0;

/// The kinds judged against the thresholds: each takes one node out (and
/// [`FaultKind::PartitionHalves`] when every one of its minorities is one node).
pub const THRESHOLDS: [FaultKind; 5] = [
    FaultKind::Kill,
    FaultKind::KillWipe,
    FaultKind::Pause,
    FaultKind::IsolateLeader,
    FaultKind::CorruptDisk,
];

/// One kind of operation in one window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OpStats {
    /// Operations counted.
    pub ops: u64,
    /// Those that succeeded.
    pub ok: u64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

impl OpStats {
    fn of(mut lat: Vec<f64>, ok: u64) -> OpStats {
        lat.sort_by(f64::total_cmp);
        let q = |p: f64| {
            if lat.is_empty() {
                0.0
            } else {
                lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1]
            }
        };
        OpStats {
            ops: lat.len() as u64,
            ok,
            p50_ms: q(0.50),
            p99_ms: q(0.99),
        }
    }

    /// Success rate (1 with no operation).
    pub fn rate(&self) -> f64 {
        if self.ops == 0 {
            1.0
        } else {
            self.ok as f64 / self.ops as f64
        }
    }

    /// Whether the thresholds hold (not with no operation: nothing shows the fabric served).
    pub fn meets(&self) -> bool {
        self.ops > 0 && self.rate() >= SUCCESS_MIN && self.p99_ms <= P99_MS_MAX
    }
}

/// Puts and gets in one window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Window {
    /// Puts.
    pub put: OpStats,
    /// Gets.
    pub get: OpStats,
    /// Failed gets left out: no holder of their block could serve it (see the module doc).
    #[serde(default)]
    pub gets_left_out: u64,
}

/// One fault kind's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KindAvailability {
    /// The kind.
    pub kind: FaultKind,
    /// Faults of it injected.
    pub faults: u64,
    /// While in force.
    pub during: Window,
    /// In the [`AFTER_MS`] after each heal.
    pub after: Window,
    /// Whether the kind is judged against the thresholds.
    pub judged: bool,
}

impl KindAvailability {
    /// What falls short of the thresholds, e.g. `during put: 97.1% of 210 ok, ...`; empty
    /// when met (or not judged).
    pub fn shortfalls(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.judged {
            return out;
        }
        for (when, w) in [("during", &self.during), ("after", &self.after)] {
            for (what, s) in [("put", &w.put), ("get", &w.get)] {
                if s.ops == 0 {
                    out.push(format!("{when} {what}: no operation to judge"));
                } else if !s.meets() {
                    out.push(format!(
                        "{when} {what}: {:.1}% of {} ok, p99 {:.0} ms (need >= {:.0}%, <= {:.0} ms)",
                        s.rate() * 100.0,
                        s.ops,
                        s.p99_ms,
                        SUCCESS_MIN * 100.0,
                        P99_MS_MAX
                    ));
                }
            }
        }
        out
    }
}

/// The nodes `f` took out: its operations there are not counted.
pub(crate) fn hit(f: &Fault) -> &[u64] {
    match f.kind {
        FaultKind::Loss | FaultKind::Delay | FaultKind::LyingPeer => &[],
        _ => &f.nodes,
    }
}

/// What the fault history says about the copies of acknowledged blocks.
struct Copies<'a> {
    h: &'a Recorded,
    /// Each acknowledged block's holders and when its put completed.
    acked: BTreeMap<&'a str, (&'a [u64], f64)>,
    /// Nodes that serve corrupted bytes for the whole run.
    liars: Vec<u64>,
}

impl<'a> Copies<'a> {
    fn new(h: &'a Recorded) -> Copies<'a> {
        let mut acked = BTreeMap::new();
        for op in &h.ops {
            if let Outcome::Put { block, holders, .. } = &op.outcome {
                acked
                    .entry(block.as_str())
                    .or_insert((holders.as_slice(), op.complete_ms));
            }
        }
        let liars = h
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::LyingPeer)
            .flat_map(|f| f.nodes.iter().copied())
            .collect();
        Copies { h, acked, liars }
    }

    /// Whether some holder of `block` could serve it at `t`, during `f` or (`during` false)
    /// after its heal: one that tells the truth, is not taken out by `f` while it is in
    /// force, and has not lost its copy to a kill since the put (killed with its disk
    /// wiped, or killed while the copy was in memory) — the checker's rule for lost blocks.
    /// A failed get of a block with none is not the fabric's to answer, so it is left out.
    /// Unknown blocks (no recorded holders) count as servable.
    fn servable(&self, block: &str, t: f64, f: &Fault, during: bool) -> bool {
        let Some((holders, put_ms)) = self.acked.get(block) else {
            return true;
        };
        if holders.is_empty() {
            return true;
        }
        holders.iter().any(|n| {
            let out_now = during && hit(f).contains(n);
            !self.liars.contains(n)
                && !out_now
                && !self.h.faults.iter().any(|g| {
                    g.kind.loses_memory()
                        && g.nodes.contains(n)
                        && g.end_ms >= *put_ms
                        && g.start_ms <= t
                        && (g.kind == FaultKind::KillWipe
                            || g.in_memory.iter().any(|b| b == block)
                            || (g.snapshot_ms > 0.0 && *put_ms >= g.snapshot_ms))
                })
        })
    }
}

/// Whether `kind`, given its faults, is judged against the thresholds.
fn judged(kind: FaultKind, faults: &[&Fault]) -> bool {
    THRESHOLDS.contains(&kind)
        || (kind == FaultKind::PartitionHalves
            && faults
                .iter()
                .filter(|f| f.kind == kind)
                .all(|f| f.nodes.len() == 1))
}

/// Per kind, in kind order, each kind's windows pooled (see the module doc for which
/// operations count where).
pub fn per_kind(h: &Recorded) -> Vec<KindAvailability> {
    #[derive(Default)]
    struct Acc {
        faults: u64,
        lat: [[Vec<f64>; 2]; 2],
        ok: [[u64; 2]; 2],
        left_out: [u64; 2],
    }
    let copies = Copies::new(h);
    let mut faults: Vec<&Fault> = h
        .faults
        .iter()
        .filter(|f| f.kind != FaultKind::LyingPeer)
        .collect();
    faults.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    let mut by: BTreeMap<FaultKind, Acc> = BTreeMap::new();
    for (i, f) in faults.iter().enumerate() {
        let a = by.entry(f.kind).or_default();
        a.faults += 1;
        let next = faults.get(i + 1).map_or(f64::INFINITY, |g| g.start_ms);
        let after_to = (f.end_ms + AFTER_MS).min(next);
        for op in &h.ops {
            if hit(f).contains(&op.node) {
                continue;
            }
            let w = if op.invoke_ms < f.end_ms && op.complete_ms > f.start_ms {
                0
            } else if op.invoke_ms >= f.end_ms && op.invoke_ms < after_to && op.complete_ms <= next
            {
                1
            } else {
                continue;
            };
            let (what, ok) = match (&op.request, &op.outcome) {
                (Request::Put { .. }, o) => (0, matches!(o, Outcome::Put { .. })),
                (Request::Get { block, .. }, o) => {
                    let ok = matches!(
                        o,
                        Outcome::Got {
                            bytes_match: true,
                            ..
                        }
                    );
                    if !ok && !copies.servable(block, op.invoke_ms, f, w == 0) {
                        a.left_out[w] += 1;
                        continue;
                    }
                    (1, ok)
                }
                _ => continue,
            };
            a.lat[w][what].push(op.complete_ms - op.invoke_ms);
            a.ok[w][what] += u64::from(ok);
        }
    }
    by.into_iter()
        .map(|(kind, mut a)| {
            let mut window = |w: usize| Window {
                put: OpStats::of(std::mem::take(&mut a.lat[w][0]), a.ok[w][0]),
                get: OpStats::of(std::mem::take(&mut a.lat[w][1]), a.ok[w][1]),
                gets_left_out: a.left_out[w],
            };
            let during = window(0);
            let after = window(1);
            KindAvailability {
                kind,
                faults: a.faults,
                during,
                after,
                judged: judged(kind, &faults),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Op;

    fn op(node: u64, t: f64, took: f64, ok: bool) -> Op {
        Op {
            client: 0,
            node,
            request: Request::Put {
                seed: 1,
                key: String::new(),
            },
            invoke_ms: t,
            complete_ms: t + took,
            outcome: if ok {
                Outcome::Put {
                    block: String::new(),
                    replicas: 2,
                    holders: vec![],
                }
            } else {
                Outcome::NoAnswer {
                    error: String::new(),
                }
            },
        }
    }

    #[test]
    fn operations_on_the_faulted_node_are_left_out_and_thresholds_judged() {
        let fault = Fault {
            kind: FaultKind::Kill,
            nodes: vec![1],
            hit_leader: true,
            start_ms: 0.0,
            end_ms: 1_000.0,
            detail: String::new(),
            in_memory: vec![],
            snapshot_ms: 0.0,
        };
        let mut ops: Vec<Op> = (0..100)
            .map(|i| op(2, i as f64 * 5.0, 20.0, true))
            .collect();
        ops.extend((0..50).map(|i| op(1, i as f64 * 5.0, 3_000.0, false)));
        ops.push(op(3, 10.0, 2_000.0, true));
        ops.extend((0..10).map(|i| op(2, 1_000.0 + i as f64 * 100.0, 30.0, true)));
        let gets: Vec<Op> = (0..10)
            .map(|i| get(3, "u", i as f64 * 50.0, true))
            .chain((0..10).map(|i| get(3, "u", 1_100.0 + i as f64 * 50.0, true)))
            .collect();
        ops.extend(gets);
        let h = Recorded {
            ops,
            faults: vec![fault],
        };
        let k = &per_kind(&h)[0];
        assert_eq!((k.kind, k.faults), (FaultKind::Kill, 1));
        assert_eq!(k.during.put.ops, 101, "n1's operations are left out");
        assert_eq!(k.during.put.ok, 101);
        assert_eq!(k.during.put.p50_ms, 20.0);
        assert_eq!(
            k.during.put.p99_ms, 20.0,
            "one slow put in 101 is below p99"
        );
        assert_eq!(k.after.put.ops, 10);
        assert!(k.shortfalls().is_empty(), "{:?}", k.shortfalls());

        let mut slow = h.clone();
        slow.ops
            .extend((0..5).map(|i| op(2, 100.0 + i as f64, 2_000.0, false)));
        let k = &per_kind(&slow)[0];
        let short = k.shortfalls();
        assert_eq!(short.len(), 1, "{short:?}");
        assert!(short[0].starts_with("during put"), "{short:?}");

        // Ten puts after the heal, one of them failed: a small window is judged, not skipped.
        let mut few = h.clone();
        few.ops.push(op(2, 1_500.0, 10.0, false));
        let short = per_kind(&few)[0].shortfalls();
        assert_eq!(short.len(), 1, "{short:?}");
        assert!(short[0].starts_with("after put: 90.9% of 11"), "{short:?}");
    }

    #[test]
    fn an_operation_in_flight_when_the_fault_began_counts_for_it() {
        let mut ops = vec![op(2, 900.0, 2_500.0, false)];
        ops.extend((0..20).map(|i| op(2, 1_100.0 + i as f64 * 50.0, 20.0, true)));
        let h = Recorded {
            ops,
            faults: vec![fault(FaultKind::Pause, &[1], 1_000.0, 3_000.0)],
        };
        let k = &per_kind(&h)[0];
        assert_eq!(
            (k.during.put.ops, k.during.put.ok),
            (21, 20),
            "the put sent before the pause and held up by it is the pause's"
        );
        let short = k.shortfalls();
        assert!(
            short.iter().any(|s| s.starts_with("during put")),
            "{short:?}"
        );
        assert!(
            short
                .iter()
                .any(|s| s == "after put: no operation to judge"),
            "an empty window is a shortfall: {short:?}"
        );
    }

    #[test]
    fn a_split_with_a_one_node_minority_is_judged_as_a_single_node_fault() {
        let h = |minority: &[u64]| Recorded {
            ops: vec![],
            faults: vec![fault(FaultKind::PartitionHalves, minority, 0.0, 1_000.0)],
        };
        assert!(per_kind(&h(&[2]))[0].judged);
        assert!(!per_kind(&h(&[2, 4]))[0].judged);
    }

    fn fault(kind: FaultKind, nodes: &[u64], start_ms: f64, end_ms: f64) -> Fault {
        Fault {
            kind,
            nodes: nodes.to_vec(),
            hit_leader: false,
            start_ms,
            end_ms,
            detail: String::new(),
            in_memory: vec![],
            snapshot_ms: 0.0,
        }
    }

    fn get(node: u64, block: &str, t: f64, ok: bool) -> Op {
        Op {
            client: 0,
            node,
            request: Request::Get {
                block: block.into(),
                seed: 1,
            },
            invoke_ms: t,
            complete_ms: t + 10.0,
            outcome: if ok {
                Outcome::Got {
                    bytes_match: true,
                    source: "local".into(),
                }
            } else {
                Outcome::Refused {
                    status: 503,
                    code: "owners_unreachable".into(),
                }
            },
        }
    }

    #[test]
    fn the_window_after_a_fault_ends_where_the_next_begins() {
        let h = Recorded {
            ops: (0..30)
                .map(|i| op(2, 1_500.0 + i as f64, 10.0, false))
                .collect(),
            faults: vec![
                fault(FaultKind::Pause, &[1], 0.0, 1_000.0),
                fault(FaultKind::Kill, &[3], 1_400.0, 3_000.0),
            ],
        };
        let k = per_kind(&h);
        let pause = k.iter().find(|k| k.kind == FaultKind::Pause).unwrap();
        assert_eq!(
            pause.after.put.ops, 0,
            "the kill's operations are the kill's"
        );
        let kill = k.iter().find(|k| k.kind == FaultKind::Kill).unwrap();
        assert_eq!(kill.during.put.ops, 30);
    }

    #[test]
    fn a_failed_get_no_remaining_honest_holder_could_serve_is_left_out_and_counted() {
        let acked = |node: u64, block: &str, holders: Vec<u64>| {
            let mut put = op(node, 0.0, 10.0, true);
            put.outcome = Outcome::Put {
                block: block.into(),
                replicas: 2,
                holders,
            };
            put
        };
        let h = Recorded {
            ops: vec![
                acked(1, "b", vec![1, 3]),
                acked(2, "c", vec![2, 3]),
                get(2, "b", 500.0, false),
                get(2, "b", 520.0, true),
                get(2, "c", 510.0, true),
                get(2, "c", 530.0, false),
            ],
            faults: vec![
                fault(FaultKind::LyingPeer, &[3], 0.0, 10_000.0),
                fault(FaultKind::Kill, &[1], 100.0, 1_000.0),
            ],
        };
        let kill = &per_kind(&h)[0];
        assert_eq!(kill.kind, FaultKind::Kill);
        assert_eq!(
            (
                kill.during.get.ops,
                kill.during.get.ok,
                kill.during.gets_left_out
            ),
            (3, 2, 1),
            "b's failed get is left out (its honest holder was killed, its other holder \
             lies), b's served get counts, c's failed get counts"
        );
    }
}
