//! The table `kvfabric bench reuse` prints, one row per routing policy, and its last line,
//! `ratio recompute_kvfabric_over_prefix <value>`; the chart's rows ([`bars`]).

use std::fmt::Write;

use kvfabric_tools::demo::report::thousands;
use kvfabric_tools::router::Policy;

use crate::plot::Bar;

/// One request as the bench saw it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestOutcome {
    /// The node whose engine served it.
    pub(crate) routed_to: String,
    /// Whole chunks.
    pub(crate) chunks: u64,
    /// Chunks read, not computed.
    pub(crate) hits: u64,
    /// Tokens prefilled.
    pub(crate) recomputed_tokens: u64,
    /// Bytes the engine's node fetched from other nodes for it.
    pub(crate) bytes_fetched: u64,
    /// Reads that differed from the engine's bytes.
    pub(crate) mismatches: u64,
    /// Routing time plus the engine's time to its first block.
    pub(crate) ttfb_ms: f64,
}

/// One policy's run.
#[derive(Debug, Clone)]
pub(crate) struct PolicyRun {
    /// The policy.
    pub(crate) policy: Policy,
    /// Its requests, in agent order.
    pub(crate) requests: Vec<RequestOutcome>,
    /// Bytes the nodes' transports received (cross-node reads and replication).
    pub(crate) transport_bytes: u64,
}

/// The nearest-rank percentile `p` (0–100) of `v`.
pub(crate) fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

impl PolicyRun {
    fn recomputed(&self) -> u64 {
        self.requests.iter().map(|r| r.recomputed_tokens).sum()
    }

    /// The figures of its row in the table.
    fn summary(&self) -> Summary {
        let chunks: u64 = self.requests.iter().map(|q| q.chunks).sum();
        let hits: u64 = self.requests.iter().map(|q| q.hits).sum();
        let ttfb: Vec<f64> = self.requests.iter().map(|q| q.ttfb_ms).collect();
        let mut per_node: Vec<(String, usize)> = Vec::new();
        for q in &self.requests {
            match per_node.iter_mut().find(|(n, _)| *n == q.routed_to) {
                Some((_, c)) => *c += 1,
                None => per_node.push((q.routed_to.clone(), 1)),
            }
        }
        per_node.sort();
        Summary {
            hit_ratio: if chunks == 0 {
                0.0
            } else {
                hits as f64 / chunks as f64
            },
            recomputed: self.recomputed(),
            fetched: self.requests.iter().map(|q| q.bytes_fetched).sum(),
            ttfb_p50_ms: percentile(&ttfb, 50.0),
            ttfb_p99_ms: percentile(&ttfb, 99.0),
            per_node,
        }
    }
}

/// One policy's row of the table.
struct Summary {
    /// Chunks read, not computed, over all chunks.
    hit_ratio: f64,
    /// Tokens prefilled.
    recomputed: u64,
    /// Bytes the engines' nodes fetched from other nodes.
    fetched: u64,
    ttfb_p50_ms: f64,
    ttfb_p99_ms: f64,
    /// Requests per node the router sent them to, by node name.
    per_node: Vec<(String, usize)>,
}

/// `kvfabric`'s tokens recomputed over `prefix`'s, if both ran and prefix recomputed any.
pub(crate) fn ratio(runs: &[PolicyRun]) -> Option<f64> {
    let get = |p| {
        runs.iter()
            .find(|r| r.policy == p)
            .map(PolicyRun::recomputed)
    };
    match (get(Policy::Kvfabric), get(Policy::Prefix)) {
        (Some(k), Some(p)) if p > 0 => Some(k as f64 / p as f64),
        _ => None,
    }
}

/// The table, the target line, and the ratio line last.
pub(crate) fn render(runs: &[PolicyRun]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>9} {:>17} {:>18} {:>18} {:>13} {:>13}  requests per node",
        "policy",
        "hit ratio",
        "tokens recomputed",
        "fetched by engines",
        "transport bytes in",
        "ttfb p50 (ms)",
        "ttfb p99 (ms)",
    );
    for r in runs {
        let m = r.summary();
        let _ = writeln!(
            out,
            "{:<12} {:>9.3} {:>17} {:>18} {:>18} {:>13.1} {:>13.1}  {}",
            r.policy.as_str(),
            m.hit_ratio,
            thousands(m.recomputed),
            thousands(m.fetched),
            thousands(r.transport_bytes),
            m.ttfb_p50_ms,
            m.ttfb_p99_ms,
            m.per_node
                .iter()
                .map(|(n, c)| format!("{n}:{c}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let _ = writeln!(
        out,
        "round-robin and prefix: engines reuse their own node's blocks by prefix key; kvfabric: \
         engines read any node's blocks by position-independent key. Transport bytes include \
         replication (2 copies)."
    );
    match ratio(runs) {
        Some(v) => {
            let _ = writeln!(
                out,
                "kvfabric recomputes {:.1}% of the tokens prefix-only routing recomputes (target: at most 50%)",
                v * 100.0
            );
            let _ = writeln!(out, "ratio recompute_kvfabric_over_prefix {v:.3}");
        }
        None => {
            let _ = writeln!(out, "ratio recompute_kvfabric_over_prefix n/a");
        }
    }
    out
}

/// The chart of what [`render`] prints: hit ratio, tokens recomputed, MB moved and time to
/// first block (ms) per policy; kvfabric scoring first (the first colour), prefix-only scoring
/// second (the baseline the ratio is over: the baseline's colour), round-robin third.
pub(crate) fn bars(runs: &[PolicyRun]) -> Vec<Bar> {
    let mut ordered: Vec<&PolicyRun> = runs.iter().collect();
    ordered.sort_by_key(|r| match r.policy {
        Policy::Kvfabric => 0,
        Policy::Prefix => 1,
        Policy::RoundRobin => 2,
    });
    let mut bars = Vec::new();
    for r in ordered {
        let (m, series) = (r.summary(), r.policy.as_str());
        let (moved, ttfb) = ("MB moved", "time to first block (ms)");
        let figures = [
            ("chunks read, not computed", m.hit_ratio, "hit ratio"),
            ("prefill", m.recomputed as f64, "tokens recomputed"),
            ("fetched by engines", m.fetched as f64 / 1e6, moved),
            ("transport bytes in", r.transport_bytes as f64 / 1e6, moved),
            ("p50", m.ttfb_p50_ms, ttfb),
            ("p99", m.ttfb_p99_ms, ttfb),
        ];
        bars.extend(
            figures
                .into_iter()
                .map(|(group, value, unit)| Bar::new(group, series, value, unit)),
        );
    }
    bars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::testing::value_of;

    fn run(policy: Policy, recomputed: &[u64]) -> PolicyRun {
        PolicyRun {
            policy,
            requests: recomputed
                .iter()
                .map(|r| RequestOutcome {
                    routed_to: "n1".into(),
                    chunks: 4,
                    hits: 4 - r / 64,
                    recomputed_tokens: *r,
                    ttfb_ms: *r as f64,
                    ..RequestOutcome::default()
                })
                .collect(),
            transport_bytes: 10,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn the_ratio_is_the_last_line() {
        let runs = [
            run(Policy::Prefix, &[256, 256]),
            run(Policy::Kvfabric, &[128, 64]),
        ];
        let text = render(&runs);
        assert_eq!(
            text.lines().last(),
            Some("ratio recompute_kvfabric_over_prefix 0.375")
        );
        assert!(text.contains("n1:2"), "{text}");
        assert_eq!(
            render(&runs[..1]).lines().last(),
            Some("ratio recompute_kvfabric_over_prefix n/a")
        );
    }

    #[test]
    fn the_chart_rows_are_the_table_figures_kvfabric_then_prefix() {
        let mut prefix = run(Policy::Prefix, &[256, 128]);
        prefix.requests[0].bytes_fetched = 3_000_000;
        let runs = [
            run(Policy::RoundRobin, &[256]),
            prefix,
            run(Policy::Kvfabric, &[64, 0]),
        ];
        let bars = bars(&runs);
        let series: Vec<&str> = bars.iter().step_by(6).map(|b| b.series.as_str()).collect();
        assert_eq!(
            series,
            ["kvfabric", "prefix", "round-robin"],
            "kvfabric first, its baseline second: the first two colours"
        );
        let find = |group: &str, series: &str, unit: &str| value_of(&bars, group, series, unit);
        // prefix: 8 chunks, hits 4 - 4 and 4 - 2: 2 of 8.
        assert_eq!(
            find("chunks read, not computed", "prefix", "hit ratio"),
            0.25
        );
        assert_eq!(
            find("chunks read, not computed", "kvfabric", "hit ratio"),
            0.875
        );
        assert_eq!(find("prefill", "prefix", "tokens recomputed"), 384.0);
        assert_eq!(find("prefill", "kvfabric", "tokens recomputed"), 64.0);
        assert_eq!(find("fetched by engines", "prefix", "MB moved"), 3.0);
        assert_eq!(find("transport bytes in", "kvfabric", "MB moved"), 10e-6);
        // ttfb_ms is the recomputed count in these runs: p50 of [256, 128] is 128.
        assert_eq!(find("p50", "prefix", "time to first block (ms)"), 128.0);
        assert_eq!(find("p99", "prefix", "time to first block (ms)"), 256.0);
        assert_eq!(bars.len(), 3 * 6);
    }
}
