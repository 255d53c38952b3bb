//! kvfabric's benchmarks, behind `kvfabric bench`: each prints a ratio against a baseline
//! measured in the same run.
//!
//! Owns: the command's arguments ([`BenchArgs`]) and the benchmark drivers; must never assert
//! on timing (figures are printed, ratios judged by the reader) or leave a process running that
//! it started.
//!
//! `kvfabric bench directory`: ownership registrations and lookups on kvfabric's directory
//! against etcd, in one run, with the same client concurrency: a 3-node cluster of `kvfabric
//! node` processes ([`kvf`]: clients through each node's HTTP API) and 3 etcd members started
//! here on loopback ([`etcd`]: clients through etcd's gRPC API), one record per request and
//! then batches of [`report::BATCH_RECORDS`] (a batch claim; a `txn`); prints a table and,
//! last, `ratio registrations_over_etcd_grpc` and `ratio batched_registrations_over_etcd_txn`.
//!
//! `kvfabric bench node` ([`node`]): PUT and GET through a node's HTTP API against a minimal
//! HTTP server on the same stack.
//! `kvfabric bench reuse` ([`reuse`]): routing policies compared through `kvfabric router`.
//! `kvfabric bench failover` ([`failover`]): put and get latency with one of three nodes
//! SIGKILLed against all healthy.
//! `kvfabric bench replication` ([`replication`]): a put's copy pushed against pulled.
//! `kvfabric bench store` ([`store`]) and `kvfabric bench transport` ([`transport`]): the
//! store and transport crates' benchmarks, the same code as their cargo bench targets.
//!
//! `--plot FILE` (every bench but `transport`): a PNG of the figures the run printed
//! ([`plot`]: grouped bars, a panel per unit, kvfabric against its baseline; `bench node`
//! draws lines against the client count).

mod drive;
mod etcd;
mod failover;
mod kvf;
mod node;
mod plot;
mod replication;
mod report;
mod reuse;
mod reuse_report;
mod store;
mod transport;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

/// Arguments of `kvfabric bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Directory registrations and lookups, kvfabric against etcd.
    Directory(DirectoryArgs),
    /// PUT and GET through a node's HTTP API (standalone, and a 3-node cluster with
    /// replication 2) against a minimal HTTP server on the same stack.
    Node(node::NodeBenchArgs),
    /// The baseline server of `bench node` (started by it; serves until stopped).
    #[command(hide = true)]
    NodeBaseline(node::BaselineArgs),
    /// Put and get latency with one of three nodes SIGKILLed against all healthy.
    Failover(failover::FailoverArgs),
    /// A put's copy pushed (the fabric's way) against pulled (the way it replaced).
    Replication(replication::ReplicationArgs),
    /// The multi-agent workload through `kvfabric router`: round-robin vs prefix-only vs
    /// kvfabric scoring on a 3-node cluster.
    Reuse(reuse::ReuseArgs),
    /// The store: sealing vs plain blake3, the disk tier vs plain file I/O.
    Store(store::StoreArgs),
    /// The transport: 4.5 MB blocks between two processes, QUIC (and UCX) vs a TCP copy.
    Transport(transport::TransportArgs),
}

/// Arguments of `kvfabric bench directory`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DirectoryArgs {
    /// Ownership records to register one per request, and as many again in batches (each
    /// side).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Concurrent clients, each with one request outstanding (each side).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Lookups per consistency level (each side).
    #[arg(long, default_value_t = 20_000)]
    lookups: u64,
    /// Working directory (the kvfabric cluster, etcd's data); a fresh one under the
    /// system's temp dir if absent. Removed at the end unless `--keep`.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The directory's `batch_delay_ms_max` (how long a partial batch may wait for more
    /// records); the node's default unless given.
    #[arg(long)]
    batch_delay_ms: Option<u64>,
    /// Sets `[cluster] KEY = VALUE` in every node's config (repeatable), as `kvfabric cluster
    /// up --cluster-set` does: e.g. `batch_inflight_max=2` to measure another setting.
    #[arg(long = "cluster-set", value_name = "KEY=VALUE")]
    cluster_set: Vec<String>,
    /// Keep the working directory.
    #[arg(long)]
    keep: bool,
    /// Skip the etcd side (the ratios are then `n/a`).
    #[arg(long)]
    skip_etcd: bool,
    /// Gives every member of both sides N threads to run on, the same rule for both: `[node]
    /// worker_threads = N` on the kvfabric nodes, `GOMAXPROCS=N` for the etcd members. Each
    /// side's own default (one per core) unless given; the three members of a side share
    /// this machine's cores either way.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    member_threads: Option<u16>,
    #[command(flatten)]
    plot: plot::PlotArg,
}

/// Runs `kvfabric bench`.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    match a.which {
        BenchCommand::Directory(d) => run_directory(d),
        BenchCommand::Node(n) => node::run(n),
        BenchCommand::NodeBaseline(b) => node::run_baseline(b),
        BenchCommand::Replication(r) => replication::run(r),
        BenchCommand::Reuse(r) => reuse::run(r),
        BenchCommand::Failover(f) => failover::run(f),
        BenchCommand::Store(s) => store::run(s),
        BenchCommand::Transport(t) => transport::run(t),
    }
}

fn run_directory(a: DirectoryArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.records > 0, "--records: expected at least 1, found 0");
    anyhow::ensure!(a.clients > 0, "--clients: expected at least 1, found 0");
    anyhow::ensure!(a.lookups > 0, "--lookups: expected at least 1, found 0");
    a.plot.check()?;
    let dir = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("kvfabric-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let procs = etcd::Procs::default();
    // Stops the etcd members even if the run panics.
    let _guard = StopOnDrop(procs.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Ctrl-C: stop what we started, remove the data, leave.
    {
        let (procs, dir, keep) = (procs.clone(), dir.clone(), a.keep);
        rt.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "interrupted: stopping the kvfabric nodes and etcd members, removing {}",
                    dir.display()
                );
                procs.stop_all();
                let stopped = tokio::task::spawn_blocking(move || {
                    let r = kvf::stop(&dir.join("kvfabric"));
                    if !keep && r.is_ok() {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    r
                })
                .await;
                if let Ok(Err(e)) = stopped {
                    eprintln!("stopping the kvfabric nodes: {e:#}");
                }
                std::process::exit(130);
            }
        });
    }
    let result = bench(&rt, &a, &dir, &procs);
    procs.stop_all();
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    if a.keep {
        println!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let r = result?;
    r.print();
    let title = format!(
        "kvfabric bench directory: {} records each way, {} clients, {} lookups per consistency",
        a.records, a.clients, a.lookups
    );
    a.plot.write_bars(&title, &r.bars())
}

fn bench(
    rt: &tokio::runtime::Runtime,
    a: &DirectoryArgs,
    dir: &std::path::Path,
    procs: &etcd::Procs,
) -> anyhow::Result<report::Report> {
    println!(
        "kvfabric bench directory: {} records one per request and {} in batches of {}, {} clients, {} lookups per consistency",
        a.records, a.records, report::BATCH_RECORDS, a.clients, a.lookups
    );
    println!("kvfabric: 3 `kvfabric node` processes (cluster up), Raft over QUIC (mTLS) between them, one store each (WAL + redb); clients through each node's HTTP API");
    match a.member_threads {
        Some(n) => println!("members: {n} thread(s) each on both sides (--member-threads: kvfabric `[node] worker_threads`, etcd `GOMAXPROCS`)"),
        None => println!("members: each side's default threads (kvfabric one worker per core, at least 2; etcd GOMAXPROCS = cores)"),
    }
    let kvf = kvf::run(a, &dir.join("kvfabric"))?;
    let etcd = if a.skip_etcd {
        println!("etcd: skipped (--skip-etcd)");
        None
    } else {
        Some(etcd::run(rt, a, &dir.join("etcd"), procs)?)
    };
    Ok(report::Report { kvf, etcd })
}

/// Stops every process started when dropped (a panic unwinding included).
struct StopOnDrop(etcd::Procs);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop_all();
    }
}
