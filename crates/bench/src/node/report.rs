//! The table and ratio lines of `kvfabric bench node`.

use std::fmt::Write;

use super::load::{Phase, Round};

/// Which server a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    /// The minimal HTTP server on the node's stack.
    Baseline,
    /// A standalone node.
    Standalone,
    /// Node 1 of a 3-node cluster, replication 2.
    Cluster,
    /// A standalone node with a GPU tier (`--gpu`).
    Gpu,
}

impl Server {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Server::Baseline => "baseline",
            Server::Standalone => "standalone",
            Server::Cluster => "cluster-r2",
            Server::Gpu => "standalone-gpu",
        }
    }
}

/// One figure: a phase's median round.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    pub(crate) gbps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

impl Figure {
    fn of(p: &Phase) -> Figure {
        Figure {
            gbps: p.gbps(),
            p50_ms: p.quantile_ms(0.50),
            p99_ms: p.quantile_ms(0.99),
        }
    }
}

/// A server at a client count.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) server: Server,
    pub(crate) clients: u64,
    pub(crate) put: Figure,
    pub(crate) get: Figure,
}

impl Row {
    /// The median round of each phase (by GB/s).
    pub(crate) fn median(server: Server, clients: u64, rounds: &[Round]) -> Row {
        let pick = |phase: fn(&Round) -> &Phase| {
            let mut v: Vec<&Phase> = rounds.iter().map(phase).collect();
            v.sort_by(|a, b| a.gbps().total_cmp(&b.gbps()));
            Figure::of(v[v.len() / 2])
        };
        Row {
            server,
            clients,
            put: pick(|r| &r.put),
            get: pick(|r| &r.get),
        }
    }
}

fn find(rows: &[Row], server: Server, clients: u64) -> Option<&Row> {
    rows.iter()
        .find(|r| r.server == server && r.clients == clients)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
        _ => "n/a".into(),
    }
}

/// The table, the scaling lines and, last, the ratio lines.
pub(crate) fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<11} {:>7} | {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8}",
        "server", "clients", "PUT GB/s", "p50 ms", "p99 ms", "GET GB/s", "p50 ms", "p99 ms"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<11} {:>7} | {:>8.3} {:>8.2} {:>8.2} | {:>8.3} {:>8.2} {:>8.2}",
            r.server.name(),
            r.clients,
            r.put.gbps,
            r.put.p50_ms,
            r.put.p99_ms,
            r.get.gbps,
            r.get.p50_ms,
            r.get.p99_ms
        );
    }
    let put = |s, c| find(rows, s, c).map(|r| r.put.gbps);
    let get = |s, c| find(rows, s, c).map(|r| r.get.gbps);
    for s in [
        Server::Baseline,
        Server::Standalone,
        Server::Gpu,
        Server::Cluster,
    ] {
        if find(rows, s, 1).is_some() && find(rows, s, 2).is_some() {
            let _ = writeln!(
                out,
                "scaling {}: 2 clients over 1: PUT {}, GET {}",
                s.name(),
                ratio(put(s, 2), put(s, 1)),
                ratio(get(s, 2), get(s, 1))
            );
        }
    }
    // One client against the baseline; the standalone node's lines last, always.
    for (server, name) in [
        (Server::Gpu, "node_gpu"),
        (Server::Cluster, "cluster"),
        (Server::Standalone, "node"),
    ] {
        if server != Server::Standalone && find(rows, server, 1).is_none() {
            continue;
        }
        let (p, g) = (put(server, 1), get(server, 1));
        let base = (put(Server::Baseline, 1), get(Server::Baseline, 1));
        let _ = writeln!(out, "ratio {name}_put_over_baseline {}", ratio(p, base.0));
        let _ = writeln!(out, "ratio {name}_get_over_baseline {}", ratio(g, base.1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn round(put_ms: u64, get_ms: u64) -> Round {
        let phase = |ms: u64| Phase {
            bytes: 1_000_000_000,
            wall: Duration::from_millis(ms),
            latencies: vec![Duration::from_millis(ms / 2), Duration::from_millis(ms)],
        };
        Round {
            put: phase(put_ms),
            get: phase(get_ms),
        }
    }

    #[test]
    fn figures_are_median_rounds_and_ratios_are_one_client_standalone_over_baseline() {
        let rows = vec![
            Row::median(
                Server::Baseline,
                1,
                &[round(500, 250), round(1000, 500), round(2000, 400)],
            ),
            Row::median(
                Server::Standalone,
                1,
                &[round(1000, 1000), round(1000, 1000), round(4000, 1000)],
            ),
            Row::median(Server::Standalone, 2, &[round(500, 500)]),
        ];
        // Baseline medians: PUT 1 GB/s (1000 ms), GET 2.5 GB/s (400 ms).
        assert_eq!(rows[0].put.gbps, 1.0);
        assert_eq!(rows[0].get.gbps, 2.5);
        assert_eq!(rows[0].put.p99_ms, 1000.0);
        let text = render(&rows);
        assert!(
            text.contains("ratio node_put_over_baseline 1.000"),
            "{text}"
        );
        assert!(
            text.contains("ratio node_get_over_baseline 0.400"),
            "{text}"
        );
        assert!(
            text.contains("scaling standalone: 2 clients over 1: PUT 2.000, GET 2.000"),
            "{text}"
        );
        assert!(
            !text.contains("cluster_put"),
            "no cluster row, no cluster ratio: {text}"
        );
        assert!(text
            .trim_end()
            .ends_with("ratio node_get_over_baseline 0.400"));
    }
}
