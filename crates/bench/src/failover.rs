//! `kvfabric bench failover`: put and get latency (p50, p99) on a 3-node cluster of separate
//! processes (`cluster up`, r = 2, QUIC on loopback), all healthy, then with one node
//! SIGKILLed (after the cluster takes writes again), in one run; last lines
//! `ratio put_p50_one_killed_over_healthy` and the p99 and get figures (target ≤ 1.2).
//!
//! Puts are sequential, each of a fresh block, spread over the nodes that run; each get reads
//! a block just put, from a node other than the one that put it (a local hit or a fetch from
//! an owner, as the cluster placed it). The killed node is the Raft leader (the worse case:
//! an election first). The time from the kill to the first acknowledged put is printed as
//! well. Every node is stopped at the end, also on failure.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use kvfabric_test_support::presets::{builtin, payload};
use kvfabric_tools::demo;

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

/// Runs the benchmark.
pub(crate) fn run(a: FailoverArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.ops > 0, "--ops: expected at least 1, found 0");
    let (dir, temporary) = demo::prepare_dir(a.dir.as_deref())?;
    let result = bench(&a, &dir);
    let _ = demo::cluster_command(&dir, "down", &[]);
    if temporary && !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn bench(a: &FailoverArgs, dir: &std::path::Path) -> anyhow::Result<()> {
    let g = builtin(&a.model);
    demo::cluster_command(dir, "up", &["--nodes", "3"])?;
    let apis = demo::node_urls(dir)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
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

    println!("SIGKILL of the leader n{leader}: first acknowledged put {first_ms:.0} ms after");
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10}",
        "phase", "put p50", "put p99", "get p50", "get p99"
    );
    for (name, p) in [
        ("all healthy", &healthy),
        ("one of three killed", &degraded),
    ] {
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
    Ok(())
}

/// The leader node `api` names (its id), from `GET /v1/cluster`.
fn leader_of(agent: &ureq::Agent, api: &str) -> Option<u64> {
    let mut r = agent.get(format!("{api}/v1/cluster")).call().ok()?;
    let v: serde_json::Value = serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()?;
    v["leader"].as_str()?.strip_prefix('n')?.parse().ok()
}
