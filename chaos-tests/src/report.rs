//! The report of a run: a summary table on stdout (operations, faults injected by kind,
//! violations by kind, recovery times) and the same as JSON, with every violation's detail
//! and the seed that reproduces it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::checker::{Checked, FinalState};
use crate::client::Outcome;
use crate::history::{Recorded, Request};
use crate::relay::Net;
use crate::run::RunConfig;

/// p50, p99 and max of a sample, ms.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Percentiles {
    /// Of `v`.
    pub fn of(v: &[f64]) -> Percentiles {
        if v.is_empty() {
            return Percentiles::default();
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| s[((s.len() as f64 - 1.0) * q).round() as usize];
        Percentiles {
            count: s.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: s[s.len() - 1],
        }
    }
}

/// Everything a run reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The seed (rerun with `--seed` to reproduce the schedule).
    pub seed: u64,
    /// Seconds of faults asked for.
    pub duration_s: f64,
    /// Seconds the nemesis actually ran (less when interrupted).
    pub ran_s: f64,
    /// Stopped by SIGINT / SIGTERM: faults healed early and the final checks cut short
    /// (`checked` counts what was checked).
    pub interrupted: bool,
    /// Nodes.
    pub nodes: u32,
    /// Replication factor.
    pub replication: u32,
    /// Planted bug, if any.
    pub planted: Option<String>,
    /// How nodes were separated (`loopback+relay` or `netns`).
    pub isolation: String,
    /// Operations by kind and outcome.
    pub operations: BTreeMap<String, BTreeMap<String, u64>>,
    /// Faults injected by kind.
    pub faults: BTreeMap<String, u64>,
    /// Every fault, in order (kind, nodes, start and end ms).
    pub fault_timeline: Vec<crate::history::Fault>,
    /// Relay packet counters: forwarded, blocked, lost.
    pub packets: BTreeMap<String, u64>,
    /// Violations by kind (every kind listed, zero included).
    pub violations_by_kind: BTreeMap<String, u64>,
    /// The checker's detail.
    pub checked: Checked,
    /// Seconds from healing to convergence, if it converged.
    pub converged_s: Option<f64>,
    /// Convergence bound.
    pub converge_bound_s: f64,
    /// The directory entry at which every node's replica was compared (`None`: not compared).
    #[serde(default)]
    pub replicas_at: Option<String>,
    /// Unavailability after leader loss.
    pub unavailability: Percentiles,
    /// The run directory (logs), kept when the run failed.
    pub dir: String,
}

/// The violation kinds the checker knows.
pub const VIOLATION_KINDS: [&str; 7] = [
    "wrong_read",
    "lost_acked_block",
    "not_linearizable",
    "not_converged",
    "replicas_diverged",
    "bad_route",
    "unavailable",
];

fn outcome_name(o: &Outcome) -> String {
    match o {
        Outcome::Put { .. } | Outcome::Got { .. } | Outcome::Looked { .. } => "ok".into(),
        Outcome::Routed { best_hits, .. } if *best_hits > 0 => "ok (a node holds it)".into(),
        Outcome::Routed { .. } => "ok (no holder)".into(),
        Outcome::NotFound => "404".into(),
        Outcome::Refused { status, code } => format!("{status} {code}"),
        Outcome::NoAnswer { .. } => "no answer".into(),
    }
}

impl Report {
    /// Assembles the report.
    pub fn new(
        cfg: &RunConfig,
        h: &Recorded,
        end: &FinalState,
        checked: Checked,
        net: &Net,
        dir: &Path,
    ) -> Report {
        let mut operations: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for op in &h.ops {
            let kind = match op.request {
                Request::Put { .. } => "put",
                Request::Get { .. } => "get",
                Request::Lookup { .. } => "lookup",
                Request::Route { .. } => "route",
            };
            *operations
                .entry(kind.into())
                .or_default()
                .entry(outcome_name(&op.outcome))
                .or_insert(0) += 1;
        }
        let mut faults = BTreeMap::new();
        for f in &h.faults {
            *faults.entry(f.kind.name()).or_insert(0) += 1;
        }
        let c = &net.counters;
        let packets = BTreeMap::from([
            ("forwarded".to_owned(), c.forwarded.load(Ordering::Relaxed)),
            ("blocked".to_owned(), c.blocked.load(Ordering::Relaxed)),
            ("lost".to_owned(), c.lost.load(Ordering::Relaxed)),
        ]);
        let mut violations_by_kind: BTreeMap<String, u64> = VIOLATION_KINDS
            .iter()
            .map(|k| ((*k).to_owned(), 0))
            .collect();
        for (k, n) in checked.by_kind() {
            *violations_by_kind.entry(k).or_insert(0) += n;
        }
        Report {
            seed: cfg.seed,
            duration_s: cfg.duration.as_secs_f64(),
            ran_s: 0.0,
            interrupted: end.interrupted,
            nodes: cfg.nodes,
            replication: cfg.replication,
            planted: cfg.planted.clone(),
            isolation: "loopback+relay".into(),
            operations,
            faults,
            fault_timeline: h.faults.clone(),
            packets,
            violations_by_kind,
            unavailability: Percentiles::of(&checked.unavailability_ms),
            checked,
            converged_s: end.converged_s,
            converge_bound_s: end.converge_bound_s,
            replicas_at: end.replicas_at.clone(),
            dir: dir.display().to_string(),
        }
    }

    /// Total violations.
    pub fn violations(&self) -> u64 {
        self.violations_by_kind.values().sum()
    }

    /// Whether no violation was found.
    pub fn passed(&self) -> bool {
        self.violations() == 0
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "kvfabric-chaos seed {} | {:.0} s of faults ({:.0} s asked) | {} nodes, r = {} | {}{}",
            self.seed,
            self.ran_s,
            self.duration_s,
            self.nodes,
            self.replication,
            self.isolation,
            self.planted
                .as_deref()
                .map(|p| format!(" | planted: {p}"))
                .unwrap_or_default()
        );
        let _ = writeln!(t, "{:<28} {:>10}", "operations", "count");
        for (kind, outcomes) in &self.operations {
            for (o, n) in outcomes {
                let _ = writeln!(t, "  {:<26} {n:>10}", format!("{kind} {o}"));
            }
        }
        let _ = writeln!(t, "{:<28} {:>10}", "faults injected", "count");
        for (k, n) in &self.faults {
            let _ = writeln!(t, "  {k:<26} {n:>10}");
        }
        for (k, n) in &self.packets {
            let _ = writeln!(t, "  {:<26} {n:>10}", format!("packets {k}"));
        }
        let _ = writeln!(t, "{:<28} {:>10}", "violations", "count");
        for (k, n) in &self.violations_by_kind {
            let _ = writeln!(t, "  {k:<26} {n:>10}");
        }
        if self.interrupted {
            let _ = writeln!(
                t,
                "INTERRUPTED (SIGINT / SIGTERM): faults healed early, final checks cut short; the counts below are what was checked"
            );
        }
        let c = &self.checked;
        let _ = writeln!(
            t,
            "checked: {} reads, {} acknowledged blocks ({} lost by every node that acknowledged holding it: excused), {} chunk keys ({} past the checker's bound), {} route answers",
            c.reads_checked, c.acked_checked, c.lost_excused, c.keys_checked, c.keys_unknown, c.routes_checked
        );
        if c.unmapped_but_held > 0 {
            let _ = writeln!(
                t,
                "finding: {} acknowledged blocks still held whose chunk key no longer resolves (every owner record purged for longer than the directory keeps chunk mappings dormant)",
                c.unmapped_but_held
            );
        }
        let _ = writeln!(
            t,
            "availability per fault kind, all its faults pooled (operations to nodes the fault did not hit, in flight during it / begun in the {:.0} s after its heal; judged: >= {:.0}% ok and p99 <= {:.0} ms, during and after, for single-node faults)",
            crate::availability::AFTER_MS / 1000.0,
            crate::availability::SUCCESS_MIN * 100.0,
            crate::availability::P99_MS_MAX
        );
        let _ = writeln!(
            t,
            "  {:<22} {:>5} {:>8} {:>7} {:>7}   {:>8} {:>7} {:>7} {:>5}   verdict",
            "kind / window", "n", "put ok", "p50", "p99", "get ok", "p50", "p99", "left"
        );
        let mut left_out = 0;
        for k in &c.availability {
            for (when, w) in [("during", &k.during), ("after", &k.after)] {
                left_out += w.gets_left_out;
                let pct = |s: &crate::availability::OpStats| format!("{:.1}%", s.rate() * 100.0);
                let verdict = match (k.judged, w.put.meets() && w.get.meets()) {
                    (false, _) => "reported",
                    (true, true) => "met",
                    (true, false) if c.availability_judged => "BELOW",
                    (true, false) => "below (not judged: --availability report)",
                };
                let _ = writeln!(
                    t,
                    "  {:<22} {:>5} {:>8} {:>7.0} {:>7.0}   {:>8} {:>7.0} {:>7.0} {:>5}   {verdict}",
                    format!("{} {when}", k.kind.name()),
                    w.put.ops + w.get.ops,
                    pct(&w.put),
                    w.put.p50_ms,
                    w.put.p99_ms,
                    pct(&w.get),
                    w.get.p50_ms,
                    w.get.p99_ms,
                    w.gets_left_out,
                );
            }
        }
        let _ = writeln!(
            t,
            "  gets left out (failed while no truthful holder of the block was live and still had its copy): {left_out}"
        );
        let _ = writeln!(
            t,
            "directory replicas: {}",
            match &self.replicas_at {
                Some(at) if self.violations_by_kind.get("replicas_diverged") == Some(&0) =>
                    format!("one digest on every node at {at}"),
                Some(at) => format!("DIFFERENT digests at {at}"),
                None => "not compared (no moment where every node had applied the same entry, or not converged)".into(),
            }
        );
        let u = &self.unavailability;
        let _ = writeln!(
            t,
            "recovery: converged {} (bound {:.0} s); unavailability after {} leader losses (the first put sent to a spared node that succeeded; {} more sent none there): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            match (self.converged_s, self.interrupted) {
                (Some(s), _) => format!("in {s:.1} s"),
                (None, true) => "not waited for (interrupted)".into(),
                (None, false) => "NOT".into(),
            },
            self.converge_bound_s,
            u.count,
            c.leader_losses_unprobed,
            u.p50_ms,
            u.p99_ms,
            u.max_ms
        );
        for v in c.violations.iter().take(10) {
            let _ = writeln!(t, "VIOLATION {}: {}", v.kind, v.detail);
        }
        let _ = writeln!(
            t,
            "{}: {} violations (reproduce: --seed {})",
            if self.passed() { "PASS" } else { "FAIL" },
            self.violations(),
            self.seed
        );
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_sample() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&v);
        assert_eq!(
            (p.count, p.p50_ms, p.p99_ms, p.max_ms),
            (100, 51.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(&[]).count, 0);
    }
}
