//! `kvfabric bench node`: PUT and GET throughput (GB/s) and latency (p50, p99) through a node's
//! HTTP API with 1, 2 and 4 concurrent clients, against a baseline measured in the same run: a
//! minimal HTTP server on the node's own stack that receives and sends the same bytes from
//! memory ([`baseline`]). Three servers: the baseline, a standalone node (host tier only) and
//! node 1 of a 3-node cluster with replication 2 (each put waits for a verified copy on a
//! second node) ([`launch`]). Rounds of every server and client count are interleaved, so
//! load on the machine that changes during the run hits all of them; each figure is the
//! median round. Prints a table ([`report`]) and, last, `ratio node_put_over_baseline` and
//! `ratio node_get_over_baseline` (one client, standalone); `--plot FILE` draws the figures as
//! a PNG ([`plot`]).

mod baseline;
mod launch;
mod load;
mod plot;
mod report;

use std::path::PathBuf;

use anyhow::{ensure, Context};
use clap::Args;
use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::HEADER_LEN;

use load::{Round, Target};
use report::{Row, Server};

/// Host RAM a node gets beyond the blocks of one round.
const HOST_HEADROOM_BYTES: u64 = 64 << 20;

/// Arguments of `kvfabric bench node-baseline` (started by `kvfabric bench node`).
#[derive(Debug, Clone, Args)]
pub(crate) struct BaselineArgs {
    /// Bytes of every get's body.
    #[arg(long)]
    bytes: usize,
}

/// Runs `kvfabric bench node-baseline`: the baseline server, until stopped.
pub(crate) fn run_baseline(a: BaselineArgs) -> anyhow::Result<()> {
    baseline::serve(a.bytes)
}

/// Arguments of `kvfabric bench node`.
#[derive(Debug, Clone, Args)]
pub(crate) struct NodeBenchArgs {
    /// The model preset whose blocks are put (an embedded preset).
    #[arg(long, default_value = "deepseek-v3")]
    model: String,
    /// Distinct blocks each client puts (and gets back) per round.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    blocks: u64,
    /// Concurrent clients to measure, comma-separated.
    #[arg(long, default_value = "1,2,4", value_delimiter = ',',
          value_parser = clap::value_parser!(u64).range(1..=64))]
    clients: Vec<u64>,
    /// Rounds per server and client count; each figure is the median round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=99))]
    rounds: u64,
    /// Skip the 3-node cluster (standalone and baseline only).
    #[arg(long)]
    skip_cluster: bool,
    /// Also measure a standalone node with a GPU tier of this many bytes, its puts and hits
    /// placed on the device (`[tiers.gpu]`; needs a build with `--features cuda` and a CUDA
    /// device, else the node stops at start with the reason).
    #[arg(long, value_name = "BYTES")]
    gpu: Option<u64>,
    /// Working directory (node configs, data, logs); a fresh temporary one if absent.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the working directory.
    #[arg(long)]
    keep: bool,
    /// `--plot FILE`: GB/s against clients, PUT and GET, one line per server.
    #[command(flatten)]
    plot: crate::plot::PlotArg,
}

/// Runs `kvfabric bench node`.
pub(crate) fn run(a: NodeBenchArgs) -> anyhow::Result<()> {
    let g = builtin_preset(&a.model)
        .with_context(|| format!("--model: no embedded preset {:?}", a.model))?;
    ensure!(
        !a.clients.is_empty(),
        "--clients: expected at least one count"
    );
    a.plot.check()?;
    let len = g.block_layout().payload_len as usize;
    ensure!(
        len >= 8,
        "--model: blocks of {len} bytes are too small to stamp"
    );
    let (dir, temporary) = kvfabric_tools::demo::prepare_dir(a.dir.as_deref())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max_clients = *a.clients.iter().max().expect("not empty") as usize;
    println!(
        "kvfabric bench node: {} blocks of {:.2} MB, {} per client, clients {}, {} rounds \
         (median), {cores} cores; servers: baseline (the node's HTTP stack, bytes from memory), \
         standalone node (host tier), {}{}",
        g.name,
        len as f64 / 1e6,
        a.blocks,
        a.clients
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
        a.rounds,
        if a.skip_cluster {
            "no cluster (--skip-cluster)"
        } else {
            "node 1 of a 3-node cluster with replication 2"
        },
        match a.gpu {
            Some(bytes) => format!(", a standalone node with a {bytes}-byte GPU tier"),
            None => String::new(),
        }
    );
    let result = measure(&a, &g.name, g.block_tokens(), len, max_clients, &dir);
    if result.is_ok() && temporary && !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("files kept in {}", dir.display());
    }
    let rows = result?;
    if let Some(path) = &a.plot.file {
        let title = format!(
            "kvfabric bench node: {} blocks, {} per client, median of {} rounds, {cores} cores",
            a.model, a.blocks, a.rounds
        );
        plot::write(path, &title, &rows)?;
    }
    print!("{}", report::render(&rows));
    Ok(())
}

fn measure(
    a: &NodeBenchArgs,
    model: &str,
    tokens: u32,
    len: usize,
    max_clients: usize,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<Row>> {
    let block = (len + HEADER_LEN) as u64;
    let host = (max_clients as u64 + 1) * a.blocks * block + HOST_HEADROOM_BYTES;
    let mut payloads = load::payloads(max_clients, a.blocks as usize, len);
    let base = launch::Server::baseline(&dir.join("baseline"), len)?;
    let standalone = launch::Server::standalone(&dir.join("standalone"), host, None)?;
    let gpu = match a.gpu {
        Some(bytes) => Some(
            launch::Server::standalone(&dir.join("standalone-gpu"), host, Some(bytes))
                .context("--gpu: a node with a GPU tier")?,
        ),
        None => None,
    };
    let gpu_url: Vec<String> = gpu.iter().map(|s| s.url.clone()).collect();
    let cluster = if a.skip_cluster {
        None
    } else {
        Some(launch::Cluster::start(&dir.join("cluster"), host)?)
    };
    let solo = [standalone.url.clone()];
    let mut servers: Vec<(Server, Target<'_>)> = vec![
        (
            Server::Baseline,
            Target {
                url: &base.url,
                model,
                tokens,
                node: false,
                cleanup: &[],
            },
        ),
        (
            Server::Standalone,
            Target {
                url: &solo[0],
                model,
                tokens,
                node: true,
                cleanup: &solo,
            },
        ),
    ];
    if !gpu_url.is_empty() {
        servers.push((
            Server::Gpu,
            Target {
                url: &gpu_url[0],
                model,
                tokens,
                node: true,
                cleanup: &gpu_url,
            },
        ));
    }
    if let Some(c) = &cluster {
        servers.push((
            Server::Cluster,
            Target {
                url: &c.urls[0],
                model,
                tokens,
                node: true,
                cleanup: &c.urls,
            },
        ));
    }
    let mut rounds: Vec<Vec<Vec<Round>>> = vec![vec![Vec::new(); a.clients.len()]; servers.len()];
    let mut stamp = 0u32;
    for r in 0..a.rounds {
        for (ci, &clients) in a.clients.iter().enumerate() {
            for (si, (server, target)) in servers.iter().enumerate() {
                stamp += 1;
                load::stamp(&mut payloads, stamp);
                let round =
                    load::round(target, &payloads[..clients as usize]).with_context(|| {
                        format!("{} with {clients} clients, round {}", server.name(), r + 1)
                    })?;
                rounds[si][ci].push(round);
            }
        }
    }
    let expected: u64 = a.rounds * a.clients.iter().sum::<u64>() * (a.blocks + 1) * len as u64;
    let received = load::received(&base.url)?;
    ensure!(
        received == expected,
        "the baseline received {received} put bytes, expected {expected}"
    );
    let mut rows = Vec::new();
    for (si, (server, _)) in servers.iter().enumerate() {
        for (ci, &clients) in a.clients.iter().enumerate() {
            rows.push(Row::median(*server, clients, &rounds[si][ci]));
        }
    }
    Ok(rows)
}
