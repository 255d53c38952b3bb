//! `kvfabric bench failover`: put and get latency (p50, p99) on a 3-node cluster of separate
//! processes (`cluster up`, r = 2, QUIC on loopback), all healthy, then with one node
//! SIGKILLed (after the cluster takes writes again), in one run; last lines
//! `ratio put_p50_one_killed_over_healthy` and the p99 and get figures (target ≤ 1.2).
//!
//! Puts are sequential, each of a fresh block, spread over the nodes that run; each get reads
//! a block just put, from a node other than the one that put it (a local hit or a fetch from
//! an owner, as the cluster placed it). The killed node is the Raft leader (the worse case:
//! an election first). The time from the kill to the first acknowledged put is printed as
//! well. Every node is stopped at the end, also on failure. `--plot FILE` draws the printed
//! figures ([`Report::bars`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use kvfabric_test_support::presets::{builtin, payload};
use kvfabric_tools::demo;

use crate::plot::{Bar, PlotArg};

/// Arguments of `kvfabric bench failover`.
#[derive(Debug, Args)]
pub(crate) struct FailoverArgs {
    /// Puts (and as many gets) per phase.
    #[arg(long, default_value_t = 200)]
    ops: u64,
    /// The model of the blocks.
    #[arg(long, default_value = "minicpm3-4b")]
    model: String,
    /// Working directory (a fresh temporary one if absent; removed unless `--keep`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the working directory.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    plot: PlotArg,
}

/// Latencies of one kind of operation, ms.
#[derive(Debug, Default)]
struct Lat(Vec<f64>);

impl Lat {
    fn q(&self, p: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    }
}

struct Phase {
    put: Lat,
    get: Lat,
}

/// What the run measured.
struct Report {
    /// The node SIGKILLed (the leader).
    leader: u64,
    /// From the SIGKILL to the first acknowledged put.
    first_ms: f64,
    healthy: Phase,
    degraded: Phase,
}

impl Report {
    /// The phases' figures, p50 and p99 of puts and gets, and the ratios.
    fn print(&self) {
        let (healthy, degraded) = (&self.healthy, &self.degraded);
        println!(
            "SIGKILL of the leader n{}: first acknowledged put {:.0} ms after",
            self.leader, self.first_ms
        );
        println!(
            "{:<22} {:>10} {:>10} {:>10} {:>10}",
            "phase", "put p50", "put p99", "get p50", "get p99"
        );
        for (name, p) in [(HEALTHY, healthy), (DEGRADED, degraded)] {
            println!(
                "{name:<22} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.1}ms",
                p.put.q(0.5),
                p.put.q(0.99),
                p.get.q(0.5),
                p.get.q(0.99)
            );
        }
        for (name, h, d) in [
            ("put_p50", healthy.put.q(0.5), degraded.put.q(0.5)),
            ("put_p99", healthy.put.q(0.99), degraded.put.q(0.99)),
            ("get_p50", healthy.get.q(0.5), degraded.get.q(0.5)),
            ("get_p99", healthy.get.q(0.99), degraded.get.q(0.99)),
        ] {
            println!("ratio {name}_one_killed_over_healthy {:.3}", d / h);
        }
    }

    /// The chart of what [`Report::print`] prints: p50 and p99 (ms) of puts and gets, one
    /// of three killed first (the subject), all healthy second (the baseline), and the time
    /// to the first put after the kill.
    fn bars(&self) -> Vec<Bar> {
        let mut bars = Vec::new();
        for (q, unit) in [(0.5, "p50 (ms)"), (0.99, "p99 (ms)")] {
            for (series, p) in [(DEGRADED, &self.degraded), (HEALTHY, &self.healthy)] {
                bars.push(Bar::new("put", series, p.put.q(q), unit));
                bars.push(Bar::new("get", series, p.get.q(q), unit));
            }
        }
        bars.push(Bar::new(
            format!("first acknowledged put after n{}'s SIGKILL", self.leader),
            DEGRADED,
            self.first_ms,
            "after the kill (ms)",
        ));
        bars
    }
}

/// The phases' names.
const HEALTHY: &str = "all healthy";
const DEGRADED: &str = "one of three killed";

/// Runs the benchmark.
pub(crate) fn run(a: FailoverArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.ops > 0, "--ops: expected at least 1, found 0");
    a.plot.check()?;
    let (dir, temporary) = demo::prepare_dir(a.dir.as_deref())?;
    let result = bench(&a, &dir);
    let _ = demo::cluster_command(&dir, "down", &[]);
    if temporary && !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let title = format!(
        "kvfabric bench failover: 3 nodes, r = 2, {} puts and gets per phase, {}",
        a.ops, a.model
    );
    a.plot.write_bars(&title, &result?.bars())
}

/// Measures both phases and prints the report (while the cluster still runs).
fn bench(a: &FailoverArgs, dir: &std::path::Path) -> anyhow::Result<Report> {
    let g = builtin(&a.model);
    demo::cluster_command(dir, "up", &["--nodes", "3"])?;
    let apis = demo::node_urls(dir)?;
    let agent: ureq::Agent = kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    );
    let put = |node: usize, seed: u64| -> anyhow::Result<(f64, String)> {
        let body = payload(&g, seed);
        let t = Instant::now();
        let mut r = agent
            .put(format!("{}/v1/blocks", apis[node]))
            .header("kvfabric-model", g.name.as_str())
            .header("kvfabric-tokens", g.block_tokens().to_string())
            .send(&body[..])
            .context("a put")?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let text = r.body_mut().read_to_string().unwrap_or_default();
        if r.status() != 201 {
            bail!("put on n{}: {} {text}", node + 1, r.status());
        }
        let v: serde_json::Value = serde_json::from_str(&text)?;
        Ok((ms, v["block"].as_str().unwrap_or("").to_owned()))
    };
    let get = |node: usize, id: &str| -> anyhow::Result<f64> {
        let t = Instant::now();
        let mut r = agent
            .get(format!("{}/v1/blocks/{id}", apis[node]))
            .call()
            .context("a get")?;
        let _ = r.body_mut().with_config().limit(64 << 20).read_to_vec();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if r.status() != 200 {
            bail!("get on n{}: {}", node + 1, r.status());
        }
        Ok(ms)
    };
    let phase = |nodes: &[usize], base: u64| -> anyhow::Result<Phase> {
        let mut p = Phase {
            put: Lat::default(),
            get: Lat::default(),
        };
        for i in 0..a.ops {
            let on = nodes[i as usize % nodes.len()];
            let (ms, id) = put(on, base + i)?;
            p.put.0.push(ms);
            let from = nodes[(i as usize + 1) % nodes.len()];
            p.get.0.push(get(from, &id)?);
        }
        Ok(p)
    };
    println!(
        "kvfabric bench failover: 3 nodes, r = 2, {} blocks of {} bytes per phase",
        a.ops,
        g.block_layout().payload_len
    );
    let healthy = phase(&[0, 1, 2], 1_000_000)?;

    let leader = leader_of(&agent, &apis[0]).context("no leader named")?;
    let pid_path = dir.join(format!("node{leader}.pid"));
    let pid: i32 = std::fs::read_to_string(&pid_path)?
        .trim()
        .parse()
        .context("a pid")?;
    // SAFETY: kill(2) of the node process `cluster up` started.
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        bail!("SIGKILL of n{leader} (pid {pid}) failed");
    }
    let killed = Instant::now();
    let rest: Vec<usize> = (0..3).filter(|n| *n + 1 != leader as usize).collect();
    let mut seed = 2_000_000;
    let first_ms = loop {
        seed += 1;
        if put(rest[0], seed).is_ok() {
            break killed.elapsed().as_secs_f64() * 1e3;
        }
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("no put succeeded within 60 s of the leader's SIGKILL");
        }
    };
    let degraded = phase(&rest, 3_000_000)?;

    let report = Report {
        leader,
        first_ms,
        healthy,
        degraded,
    };
    report.print();
    Ok(report)
}

/// The leader node `api` names (its id), from `GET /v1/cluster`.
fn leader_of(agent: &ureq::Agent, api: &str) -> Option<u64> {
    let mut r = agent.get(format!("{api}/v1/cluster")).call().ok()?;
    let v: serde_json::Value = serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()?;
    v["leader"].as_str()?.strip_prefix('n')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::testing::value_of;

    #[test]
    fn the_chart_rows_are_the_printed_percentiles() {
        let lat = |v: &[f64]| Lat(v.to_vec());
        let ms: Vec<f64> = (1..=100).map(f64::from).collect();
        let r = Report {
            leader: 2,
            first_ms: 1250.0,
            healthy: Phase {
                put: lat(&ms),
                get: lat(&[3.0]),
            },
            degraded: Phase {
                put: lat(&ms.iter().map(|m| m * 2.0).collect::<Vec<_>>()),
                get: lat(&[5.0, 7.0]),
            },
        };
        let bars = r.bars();
        let find = |group: &str, series: &str, unit: &str| value_of(&bars, group, series, unit);
        assert_eq!(find("put", HEALTHY, "p50 (ms)"), 50.0);
        assert_eq!(find("put", HEALTHY, "p99 (ms)"), 99.0);
        assert_eq!(find("put", DEGRADED, "p99 (ms)"), 198.0);
        assert_eq!(find("get", DEGRADED, "p50 (ms)"), 5.0);
        assert_eq!(find("get", HEALTHY, "p99 (ms)"), 3.0);
        let after = "first acknowledged put after n2's SIGKILL";
        assert_eq!(find(after, DEGRADED, "after the kill (ms)"), 1250.0);
        assert_eq!(bars.len(), 9);
        assert_eq!(
            bars[0].series, DEGRADED,
            "the subject first: the first colour"
        );
    }
}
