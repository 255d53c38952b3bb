//! Availability per fault kind: for every kind of fault injected, the puts and gets sent to
//! nodes the fault did not hit — how many succeeded and how long they took (p50, p99) —
//! while it was in force, and in the window after it was healed, with the thresholds a
//! single-node fault must meet.
//!
//! "Did not hit": a kill, wipe or pause stops one node; a partition cuts off its minority; an
//! asymmetric partition drops one direction out of one node; loss and delay touch every node,
//! so their operations all count. A get counts only if some holder of its block could serve
//! it: one that tells the truth (not a `--lying-peer`), is not hit by the fault, and has not
//! lost its copy to an earlier kill (the checker's rule for lost blocks). The window after a
//! fault is cut short where the next fault begins. What counts as success: a put acknowledged (201), a get of
//! an acknowledged block answered 200 with the right bytes. Latency is each operation's, its
//! failures included (an unanswered one at the client's bound).
//!
//! Thresholds ([`THRESHOLDS`]): a fault that takes one node out (kill, kill + wipe, pause,
//! the leader isolated, a corrupted disk) must leave at least 99% of the puts and of the gets
//! to the other nodes succeeding, with p99 at most 1.5 s, during the fault and after it.
//! Windows with fewer than [`MIN_OPS`] operations are reported, not judged: below 100 the 99th
//! percentile is the slowest operation, and one miss is more than 1%.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Outcome;
use crate::history::{Fault, FaultKind, Recorded, Request};

/// Least success rate a single-node fault must keep, puts and gets alike.
pub const SUCCESS_MIN: f64 = 0.99;
/// Highest p99 latency a single-node fault may cause.
pub const P99_MS_MAX: f64 = 1_500.0;
/// Fewest operations in a window for it to be judged.
pub const MIN_OPS: u64 = 100;
/// How long after a heal counts as "after".
pub const AFTER_MS: f64 = 5_000.0;

/// The kinds judged against the thresholds: each takes one node out.
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

    /// `None`: too few operations to judge; else whether the thresholds hold.
    pub fn meets(&self) -> Option<bool> {
        (self.ops >= MIN_OPS).then(|| self.rate() >= SUCCESS_MIN && self.p99_ms <= P99_MS_MAX)
    }
}

/// Puts and gets in one window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Window {
    /// Puts.
    pub put: OpStats,
    /// Gets.
    pub get: OpStats,
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
    /// What falls short of the thresholds, e.g. `during put 97.1% ok`; empty when met (or
    /// not judged).
    pub fn shortfalls(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.judged {
            return out;
        }
        for (when, w) in [("during", &self.during), ("after", &self.after)] {
            for (what, s) in [("put", &w.put), ("get", &w.get)] {
                if s.meets() == Some(false) {
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
fn hit(f: &Fault) -> &[u64] {
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

    /// Whether some holder of `block` could serve it at `t` while `f` is in force: one that
    /// tells the truth, is not taken out by `f`, and has not lost its copy to an earlier
    /// fault (killed with its disk wiped, or killed while the copy was in memory) — the
    /// checker's rule for lost blocks. A get of a block with none is not the fabric's to
    /// answer, so it is left out. Unknown blocks (no recorded holders) count as servable.
    fn servable(&self, block: &str, t: f64, f: &Fault) -> bool {
        let Some((holders, put_ms)) = self.acked.get(block) else {
            return true;
        };
        if holders.is_empty() {
            return true;
        }
        holders.iter().any(|n| {
            !self.liars.contains(n)
                && !hit(f).contains(n)
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

/// Per kind, in kind order. The window after a fault ends where the next fault begins, so
/// that no operation is charged to two faults.
pub fn per_kind(h: &Recorded) -> Vec<KindAvailability> {
    #[derive(Default)]
    struct Acc {
        faults: u64,
        lat: [[Vec<f64>; 2]; 2],
        ok: [[u64; 2]; 2],
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
        let windows = [
            (f.start_ms, f.end_ms),
            (f.end_ms, (f.end_ms + AFTER_MS).min(next)),
        ];
        for op in &h.ops {
            if hit(f).contains(&op.node) {
                continue;
            }
            if let Request::Get { block, .. } = &op.request {
                if !copies.servable(block, op.invoke_ms, f) {
                    continue;
                }
            }
            let (what, ok) = match (&op.request, &op.outcome) {
                (Request::Put { .. }, o) => (0, matches!(o, Outcome::Put { .. })),
                (Request::Get { .. }, o) => (
                    1,
                    matches!(
                        o,
                        Outcome::Got {
                            bytes_match: true,
                            ..
                        }
                    ),
                ),
                _ => continue,
            };
            for (w, (from, to)) in windows.iter().enumerate() {
                if op.invoke_ms >= *from && op.invoke_ms < *to {
                    a.lat[w][what].push(op.complete_ms - op.invoke_ms);
                    a.ok[w][what] += u64::from(ok);
                }
            }
        }
    }
    by.into_iter()
        .map(|(kind, mut a)| {
            let mut window = |w: usize| Window {
                put: OpStats::of(std::mem::take(&mut a.lat[w][0]), a.ok[w][0]),
                get: OpStats::of(std::mem::take(&mut a.lat[w][1]), a.ok[w][1]),
            };
            let during = window(0);
            let after = window(1);
            KindAvailability {
                kind,
                faults: a.faults,
                during,
                after,
                judged: THRESHOLDS.contains(&kind),
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
        assert!(k.shortfalls().is_empty(), "{:?}", k.shortfalls());
        assert_eq!(k.after.put.meets(), None, "too few after the heal to judge");

        let mut slow = h.clone();
        slow.ops
            .extend((0..5).map(|i| op(2, 100.0 + i as f64, 2_000.0, false)));
        let k = &per_kind(&slow)[0];
        let short = k.shortfalls();
        assert_eq!(short.len(), 1, "{short:?}");
        assert!(short[0].starts_with("during put"), "{short:?}");
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
    fn a_get_no_remaining_honest_holder_could_serve_is_left_out() {
        let mut put = op(1, 0.0, 10.0, true);
        put.outcome = Outcome::Put {
            block: "b".into(),
            replicas: 2,
            holders: vec![1, 3],
        };
        let mut put2 = op(2, 0.0, 10.0, true);
        put2.outcome = Outcome::Put {
            block: "c".into(),
            replicas: 2,
            holders: vec![2, 3],
        };
        let h = Recorded {
            ops: vec![
                put,
                put2,
                get(2, "b", 500.0, false),
                get(2, "c", 510.0, true),
            ],
            faults: vec![
                fault(FaultKind::LyingPeer, &[3], 0.0, 10_000.0),
                fault(FaultKind::Kill, &[1], 100.0, 1_000.0),
            ],
        };
        let kill = &per_kind(&h)[0];
        assert_eq!(kill.kind, FaultKind::Kill);
        assert_eq!(
            (kill.during.get.ops, kill.during.get.ok),
            (1, 1),
            "b's honest holder was killed and its other holder lies: left out; c counts"
        );
    }
}
