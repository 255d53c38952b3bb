//! `kvfabric demo`: the main job on embedded defaults.
//!
//! Starts a local 3-node cluster with the code `cluster up` uses (separate processes,
//! generated certificates, replication 2), runs a multi-agent workload on DeepSeek-V3
//! geometry ([`workload`]): every agent starts with the same system prompt, then its own
//! preamble, then 2–3 documents of a shared pool in its own order, then its own question.
//! Each agent looks its chunks up by position-independent chunk key on its node, reads what
//! the fabric has (the node fetches and verifies across nodes; every byte is compared with
//! what the stand-in engine computes) and computes and puts what it has not. Then it prints a
//! report ([`report`]) — tokens a prefix-only cache would have reused vs what kvfabric reused,
//! bytes moved between nodes, blocks verified, copies per distinct block, dedup collisions —
//! and stops the cluster with the code `cluster down` uses: always, also on failure and on
//! Ctrl-C or SIGTERM, and checks that no node process is left.

pub mod driver;
pub mod report;
pub mod workload;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Args, FromArgMatches};
use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::{ModelGeometry, NamespaceKey, HEADER_LEN};

use crate::client::{Client, ClientArgs};
use crate::cluster::ClusterArgs;
use driver::{NodeApi, INTERRUPTED};
use report::{metric_sum, Report};
use workload::Workload;

/// The model the demo runs.
const MODEL: &str = "deepseek-v3";
/// Nodes in the demo cluster.
const NODES: usize = 3;
/// Copies each put waits for.
const REPLICATION: u32 = 2;
/// Seconds `cluster up` may take to get every node ready.
const UP_TIMEOUT_S: &str = "60";
/// Seconds `cluster down` waits after SIGTERM before SIGKILL.
const DOWN_GRACE_S: &str = "10";
/// Host tier floor per node.
const HOST_BYTES_MIN: u64 = 256 << 20;
/// Host tier headroom per node beyond the workload's distinct blocks.
const HOST_BYTES_HEADROOM: u64 = 64 << 20;

/// Arguments of `kvfabric demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the cluster's certificates, configs, data and logs; must be empty or
    /// absent, and is kept. Default: a fresh temporary directory, removed afterwards.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Agents, spread over the three nodes (agent i runs on node i mod 3).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=48))]
    agents: u32,
    /// Shared documents in the pool (1 to 3 chunks of 64 tokens each).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=24))]
    docs: u32,
    /// Seed of the workload (token ids, preambles, document order).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Agents running at a time.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    parallel: u32,
    /// Keep the directory (configs, data, logs) after the demo.
    #[arg(long)]
    keep: bool,
}

/// Runs `kvfabric demo`.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let g = builtin_preset(MODEL).with_context(|| format!("no embedded preset {MODEL:?}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop))?;
    let (dir, temporary) = prepare_dir(a.dir.as_deref())?;
    let result = session(&a, &g, &dir, &stop);
    let start = Instant::now();
    let down = cluster_command(&dir, "down", &["--grace-s", DOWN_GRACE_S])
        .and_then(|()| none_running(&dir));
    let down_s = start.elapsed().as_secs_f64();
    let interrupted = stop.load(Ordering::SeqCst);
    let keep = a.keep || !temporary || down.is_err() || (result.is_err() && !interrupted);
    if !keep {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let files = if keep {
        format!("files kept in {}", dir.display())
    } else {
        format!("{} removed", dir.display())
    };
    match (result, down) {
        (Ok(()), Ok(())) => {
            println!("cluster stopped in {down_s:.1} s; no node left running; {files}");
            Ok(())
        }
        (Err(e), Ok(())) => Err(e.context(format!("demo failed; cluster stopped, {files}"))),
        (Ok(()), Err(d)) => Err(d.context(format!("stopping the demo cluster ({files})"))),
        (Err(e), Err(d)) => Err(d.context(format!(
            "stopping the demo cluster after it failed ({}; {files})",
            crate::exit::one_line(&e)
        ))),
    }
}

/// Brings the cluster up, runs the agents, prints the report. The caller stops the cluster.
fn session(a: &DemoArgs, g: &ModelGeometry, dir: &Path, stop: &AtomicBool) -> anyhow::Result<()> {
    let ns = NamespaceKey::derive(kvfabric_core::OPEN_NAMESPACE);
    let block_tokens = g.block_tokens() as usize;
    let block_bytes = g.block_layout().payload_len;
    let w = Workload::new(
        a.seed,
        a.agents as usize,
        a.docs as usize,
        NODES,
        block_tokens,
    );
    let distinct = driver::distinct_keys(g, &ns, &w.agents);
    // Every node could end up holding every distinct block (replicas and cross-node reads).
    let host_bytes = (distinct.len() as u64 * (block_bytes + HEADER_LEN as u64)
        + HOST_BYTES_HEADROOM)
        .max(HOST_BYTES_MIN)
        .div_ceil(1 << 20);
    eprintln!(
        "kvfabric demo: {} agents, {} shared documents, {} distinct blocks of {} B ({MODEL}); \
         starting {NODES} nodes in {}",
        a.agents,
        a.docs,
        distinct.len(),
        report::thousands(block_bytes),
        dir.display()
    );
    let start = Instant::now();
    cluster_up(dir, host_bytes, UP_TIMEOUT_S)?;
    let up = start.elapsed();
    if stop.load(Ordering::SeqCst) {
        bail!(INTERRUPTED);
    }
    let nodes = node_apis(dir)?;
    eprintln!(
        "kvfabric demo: running {} agents, {} at a time",
        a.agents, a.parallel
    );
    let start = Instant::now();
    let outcomes = driver::run_all(g, &ns, &nodes, &w.agents, a.parallel as usize, stop)?;
    let workload = start.elapsed();
    let copies = driver::lookup(&nodes[0], &distinct)?
        .into_iter()
        .zip(&distinct)
        .map(|((block, owners), key)| match block {
            Some(_) => Ok(owners),
            None => bail!(
                "chunk key {key} was put but is not in {}'s directory",
                nodes[0].name
            ),
        })
        .collect::<anyhow::Result<Vec<usize>>>()?;
    let mut r = Report {
        model: g.name.clone(),
        block_bytes,
        block_tokens: block_tokens as u64,
        nodes: NODES,
        replication: REPLICATION,
        seed: a.seed,
        parallel: a.parallel as usize,
        docs: w.doc_chunks.len(),
        doc_chunks: w.doc_chunks.iter().sum(),
        agents: outcomes,
        prefix_reused_tokens: driver::prefix_baseline(g, &ns, &w.agents).iter().sum(),
        copies,
        up,
        workload,
        ..Report::default()
    };
    for n in &nodes {
        let text = driver::metrics(n)?;
        let t = |stat: &str| {
            metric_sum(
                &text,
                "kvfabric_transport",
                Some(&format!("stat=\"{stat}\"")),
            )
        };
        r.transport_bytes_in += t("bytes_in");
        r.transport_fetches_ok += t("fetches_ok");
        r.transport_pushes_stored += t("pushes_stored");
        r.transport_fetches_failed += t("fetches_failed");
        r.transport_verify_failures += t("verify_failures");
        r.store_verify_failures += metric_sum(&text, "kvfabric_verify_failures_total", None);
        r.dedup_collisions += metric_sum(&text, "kvfabric_dedup_collisions_total", None);
    }
    print!("{}", r.render());
    if r.mismatches() > 0 {
        bail!("{} reads differed from the engine's bytes", r.mismatches());
    }
    if r.copies.contains(&0) {
        bail!("a block the agents put has no live owner");
    }
    if r.dedup_collisions > 0 {
        bail!("dedup_collisions is {} (expected 0)", r.dedup_collisions);
    }
    Ok(())
}

/// A fresh directory: `dir` if given (created; refused unless empty), else a new one under the
/// system's temporary directory. The path, and whether it is temporary.
pub fn prepare_dir(dir: Option<&Path>) -> anyhow::Result<(PathBuf, bool)> {
    let (path, temporary) = match dir {
        Some(d) => {
            if d.exists() {
                let mut entries =
                    std::fs::read_dir(d).with_context(|| format!("reading {}", d.display()))?;
                if entries.next().is_some() {
                    bail!(
                        "--dir {}: not empty; the demo needs a fresh directory",
                        d.display()
                    );
                }
            }
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (d.to_path_buf(), false)
        }
        None => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let d = std::env::temp_dir()
                .join(format!("kvfabric-demo-{}-{nanos:09}", std::process::id()));
            std::fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
            (d, true)
        }
    };
    let path = path
        .canonicalize()
        .with_context(|| format!("resolving {}", path.display()))?;
    Ok((path, temporary))
}

/// `kvfabric cluster up` of the demo's cluster in `dir`: 3 nodes, replication 2, each with
/// `host_mib` MiB of host RAM, ready within `timeout_s` seconds.
pub fn cluster_up(dir: &Path, host_mib: u64, timeout_s: &str) -> anyhow::Result<()> {
    cluster_command(
        dir,
        "up",
        &[
            "--nodes",
            &NODES.to_string(),
            "--replication",
            &REPLICATION.to_string(),
            "--host-bytes",
            &format!("{host_mib} MiB"),
            "--timeout-s",
            timeout_s,
        ],
    )
}

/// Runs `kvfabric cluster <sub> --dir DIR <rest>` in this process (the same code as the
/// command).
pub fn cluster_command(dir: &Path, sub: &str, rest: &[&str]) -> anyhow::Result<()> {
    let mut argv: Vec<OsString> = vec!["cluster".into(), sub.into(), "--dir".into()];
    argv.push(dir.as_os_str().to_owned());
    argv.extend(rest.iter().map(OsString::from));
    let matches = ClusterArgs::augment_args(clap::Command::new("cluster"))
        .try_get_matches_from(argv)
        .context("building the cluster command")?;
    let args = ClusterArgs::from_arg_matches(&matches).context("building the cluster command")?;
    crate::cluster::run(args)
}

/// The API of each node, from the configs `cluster up` wrote.
pub fn node_apis(dir: &Path) -> anyhow::Result<Vec<NodeApi>> {
    node_urls(dir)?
        .into_iter()
        .enumerate()
        .map(|(i, node)| {
            let client = Client::new(&ClientArgs { node, token: None })?;
            Ok(NodeApi {
                name: format!("n{}", i + 1),
                client,
            })
        })
        .collect()
}

/// Each node's API URL (`http://host:port`), from the configs `cluster up` wrote.
pub fn node_urls(dir: &Path) -> anyhow::Result<Vec<String>> {
    (1..=NODES)
        .map(|id| {
            let path = dir.join(format!("node{id}.toml"));
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let table: toml::Table =
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
            let listen = table
                .get("node")
                .and_then(|n| n.get("http_listen"))
                .and_then(toml::Value::as_str)
                .with_context(|| format!("{}: no node.http_listen", path.display()))?;
            Ok(format!("http://{listen}"))
        })
        .collect()
}

/// Fails if any process still runs with one of the cluster's configs on its command line
/// (independent of pid files).
pub fn none_running(dir: &Path) -> anyhow::Result<()> {
    let configs: Vec<OsString> = (1..=NODES)
        .map(|id| dir.join(format!("node{id}.toml")).into_os_string())
        .collect();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc")
        .context("reading /proc")?
        .flatten()
    {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let names_config = cmdline
            .split(|b| *b == 0)
            .any(|arg| configs.iter().any(|c| c.as_encoded_bytes() == arg));
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next().map(str::to_owned))
            })
            .is_none_or(|state| state == "Z" || state == "X");
        if names_config && !zombie {
            left.push(pid.to_string());
        }
    }
    if !left.is_empty() {
        bail!("node processes still running: pid {}", left.join(", "));
    }
    Ok(())
}

/// Raises `stop` on the first SIGINT or SIGTERM (later ones are ignored while the demo stops
/// the cluster). The nodes run in their own process group, so a terminal's Ctrl-C reaches only
/// this process.
pub fn watch_signals(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal watcher")?;
    let (tx, rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
    std::thread::Builder::new()
        .name("demo-signals".into())
        .spawn(move || {
            rt.block_on(async move {
                let (mut int, mut term) = match (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) {
                    (Ok(i), Ok(t)) => {
                        let _ = tx.send(Ok(()));
                        (i, t)
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                stop.store(true, Ordering::SeqCst);
                eprintln!("kvfabric demo: interrupted; stopping the cluster");
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
            });
        })
        .context("starting the signal watcher")?;
    rx.recv()
        .context("the signal watcher stopped")?
        .context("installing the signal handlers")
}
