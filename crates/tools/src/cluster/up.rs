//! `kvfabric cluster up [--nodes N] [--dir DIR]`: certificates, the namespace secret (kept if
//! the directory has one: the nodes' blocks are keyed by it), configs, N node processes,
//! a bounded wait for their readiness with progress, and each node's API address.
//!
//! Refuses a directory whose nodes are still running. On any failure it stops the nodes it
//! started and names the node and the tail of its log. Ports are chosen free and released
//! before the nodes bind them, so another process can take one in between: a node that
//! exits because its port is in use makes `up` pick new ports and start again (up to
//! [`PORT_ATTEMPTS`] times), when the nodes' data directories are its own from this run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;

use kvfabric_progress::{Progress, Unit};

use super::{down, layout, procs, DIR_DEFAULT};

/// Most nodes `up` starts.
const NODES_MAX: u32 = 16;
/// Lines of a failed node's log quoted in the error.
const LOG_TAIL_LINES: usize = 5;
/// Pause between readiness polls.
const POLL_MS: u64 = 250;
/// Bound on one readiness request.
const PROBE_TIMEOUT_MS: u64 = 1_000;
/// Starts with freshly chosen ports before `up` gives up on ports taken by others.
pub const PORT_ATTEMPTS: u32 = 3;
/// What the OS says of a port another socket holds (`EADDRINUSE`), as a node logs it.
const ADDR_IN_USE: [&str; 2] = ["Address already in use", "os error 98"];

/// Arguments of `kvfabric cluster up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Nodes to start.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Directory for certificates, configs, data, logs and pid files.
    #[arg(long, default_value = DIR_DEFAULT)]
    dir: PathBuf,
    /// Seconds to wait for every node to be ready.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Copies a put waits for (default: 2 with two or more nodes, 1 alone).
    #[arg(long)]
    replication: Option<u32>,
    /// Each node's host RAM tier (blocks beyond it demote to the disk tier).
    #[arg(long, default_value = layout::HOST_BYTES_DEFAULT)]
    host_bytes: String,
    /// An extra `[cluster]` key for every node, as `KEY=VALUE` with a TOML value (e.g.
    /// `lease_ms=3000`); repeatable. The nodes validate it like any config key.
    #[arg(long = "cluster-set", value_name = "KEY=VALUE", value_parser = layout::parse_cluster_set)]
    cluster_set: Vec<(String, String)>,
    /// A TOML file of `[[namespaces]]` and `[[tenants]]` sections appended to every node's
    /// config (a cluster with tenants; without it the nodes are open).
    #[arg(long, value_name = "FILE")]
    tenancy: Option<PathBuf>,
    /// What carries blocks between the nodes: `quic` (the default) or `ucx` (a build with
    /// `--features ucx`; UCX over TCP unless `UCX_TLS` says otherwise).
    #[arg(long, value_parser = ["quic", "ucx"])]
    transport: Option<String>,
    /// An `[events]` key for every node, as `KEY=VALUE` with a TOML value (e.g.
    /// `zmq_pub="tcp://127.0.0.1:0"`); repeatable. The nodes validate it like any config key.
    #[arg(long = "events-set", value_name = "KEY=VALUE", value_parser = layout::parse_cluster_set)]
    events_set: Vec<(String, String)>,
    /// A `[tiers.disk]` key for every node, as `KEY=VALUE` with a TOML value (e.g.
    /// `scrub_pause_ms=200`); repeatable. The nodes validate it like any config key.
    #[arg(long = "disk-set", value_name = "KEY=VALUE", value_parser = layout::parse_cluster_set)]
    disk_set: Vec<(String, String)>,
    /// Each node's async worker threads (`[node] worker_threads`; default one per core, at
    /// least 2). The nodes share this machine's cores: `1` on a small one keeps them from
    /// preempting each other.
    #[arg(long, value_name = "N")]
    worker_threads: Option<usize>,
}

/// Runs `kvfabric cluster up`.
pub fn run(a: UpArgs) -> anyhow::Result<()> {
    if a.nodes == 0 || a.nodes > NODES_MAX {
        anyhow::bail!("--nodes: expected 1 to {NODES_MAX}, found {}", a.nodes);
    }
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let dir = a
        .dir
        .canonicalize()
        .with_context(|| format!("resolving {}", a.dir.display()))?;
    for id in 1..=u64::from(NODES_MAX) * 4 {
        if let Some(pid) = procs::read_pid(&layout::pid_path(&dir, id))? {
            if procs::is_node(pid, &layout::config_path(&dir, id)) {
                anyhow::bail!(
                    "{}: node n{id} (pid {pid}) is still running; run `kvfabric cluster down --dir {}` first",
                    dir.display(),
                    dir.display()
                );
            }
        }
    }
    kvfabric_transport::generate_cluster(&dir.join("certs"), a.nodes)
        .context("generating certificates")?;
    // Kept when present: the blocks in the nodes' data directories are keyed by it.
    kvfabric_core::secret::ensure(&dir.join("certs").join(kvfabric_core::secret::SECRET_FILE))
        .context("writing the namespace secret")?;
    let tenancy = match &a.tenancy {
        Some(f) => layout::tenancy(f)?,
        None => String::new(),
    };
    let token = layout::new_operator_token()?;
    layout::write_operator_token(&dir, &token)?;
    // Data directories that exist already hold a cluster's data: never wiped for a retry.
    let fresh = (1..=u64::from(a.nodes)).all(|id| !layout::data_path(&dir, id).exists());
    let mut attempt = 1;
    let nodes = loop {
        let nodes = layout::plan(a.nodes)?;
        match start(&a, &dir, &nodes, &token, &tenancy) {
            Ok(()) => break nodes,
            Err(e) => {
                let _ = down::stop_all(&dir, Duration::from_secs(5));
                let in_use = nodes.iter().any(|n| port_taken(&log_tail(&dir, n.id)));
                if !(fresh && in_use && attempt < PORT_ATTEMPTS) {
                    return Err(e);
                }
                eprintln!("a port was taken before its node bound it ({e:#}); new ports, attempt {} of {PORT_ATTEMPTS}", attempt + 1);
                for n in &nodes {
                    let data = layout::data_path(&dir, n.id);
                    std::fs::remove_dir_all(&data)
                        .or_else(|e| {
                            if e.kind() == std::io::ErrorKind::NotFound {
                                Ok(())
                            } else {
                                Err(e)
                            }
                        })
                        .with_context(|| format!("removing {} for a new start", data.display()))?;
                }
                attempt += 1;
            }
        }
    };
    for n in &nodes {
        println!("n{} {}", n.id, n.api());
    }
    if let Some(n) = nodes.first() {
        println!(
            "dashboard {}/dashboard#token={token} (the operator token is in {})",
            n.api(),
            layout::operator_token_path(&dir).display()
        );
    }
    println!(
        "ready; stop with `kvfabric cluster down --dir {}`",
        dir.display()
    );
    Ok(())
}

/// Whether a node's log says it could not bind a port another socket holds.
pub fn port_taken(log: &str) -> bool {
    ADDR_IN_USE.iter().any(|m| log.contains(m))
}

/// Writes every node's config (`tenancy`: the `--tenancy` text appended to each), starts the
/// nodes and waits until they are ready.
fn start(
    a: &UpArgs,
    dir: &Path,
    nodes: &[layout::NodeLayout],
    token: &str,
    tenancy: &str,
) -> anyhow::Result<()> {
    for n in nodes {
        let path = layout::config_path(dir, n.id);
        let config = layout::config(
            dir,
            n,
            nodes,
            a.replication,
            &a.host_bytes,
            &layout::ExtraKeys {
                cluster: a.cluster_set.clone(),
                events: a.events_set.clone(),
                disk: a.disk_set.clone(),
                transport: a.transport.clone(),
                worker_threads: a.worker_threads,
            },
            token,
        )
        .to_toml(&format!(
            "Written by `kvfabric cluster up`; node {} of {}.",
            n.id,
            nodes.len()
        ));
        std::fs::write(&path, config + tenancy)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("starting {} nodes in {}", nodes.len(), dir.display());
    let mut children = Vec::new();
    for n in nodes {
        children.push((n.id, spawn(dir, n.id)?));
    }
    wait_ready(dir, nodes, &mut children, Duration::from_secs(a.timeout_s))
}

/// Starts node `id` in its own process group (so a Ctrl-C of `up` does not reach it), with
/// its output in its log file, and writes its pid file.
pub(super) fn spawn(dir: &Path, id: u64) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("locating the kvfabric binary")?;
    let log_path = layout::log_path(dir, id);
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let child = Command::new(exe)
        .arg("node")
        .arg("--config")
        .arg(layout::config_path(dir, id))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting node n{id}"))?;
    let pid_path = layout::pid_path(dir, id);
    std::fs::write(&pid_path, format!("{}\n", child.id()))
        .with_context(|| format!("writing {}", pid_path.display()))?;
    Ok(child)
}

fn log_tail(dir: &Path, id: u64) -> String {
    let text = std::fs::read_to_string(layout::log_path(dir, id)).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join(" | ")
}

fn probe(agent: &ureq::Agent, api: &str) -> bool {
    agent
        .get(format!("{api}/readyz"))
        .call()
        .is_ok_and(|r| r.status() == 200)
}

/// Polls every node's `/readyz` until all answer 200, printing each one as it becomes ready;
/// fails when a node exits or `limit` passes.
fn wait_ready(
    dir: &Path,
    nodes: &[layout::NodeLayout],
    children: &mut [(u64, Child)],
    limit: Duration,
) -> anyhow::Result<()> {
    let agent: ureq::Agent = kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(PROBE_TIMEOUT_MS)))
            .http_status_as_error(false)
            .build(),
    );
    let start = Instant::now();
    let mut ready = vec![false; nodes.len()];
    let bar = Progress::new("cluster up", nodes.len() as u64, Unit::Items("nodes ready"));
    let waiting = |ready: &[bool]| -> Vec<String> {
        nodes
            .iter()
            .zip(ready)
            .filter(|(_, r)| !**r)
            .map(|(n, _)| format!("n{}", n.id))
            .collect()
    };
    bar.message(format!("waiting for {}", waiting(&ready).join(", ")));
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if ready[i] {
                continue;
            }
            if let Some((_, child)) = children.iter_mut().find(|(id, _)| *id == n.id) {
                if let Ok(Some(status)) = child.try_wait() {
                    anyhow::bail!(
                        "node n{} exited ({status}) before it was ready; its log ends: {}",
                        n.id,
                        log_tail(dir, n.id)
                    );
                }
            }
            if probe(&agent, &n.api()) {
                ready[i] = true;
                bar.inc(1);
                bar.message(format!("waiting for {}", waiting(&ready).join(", ")));
                // The result lines stay on standard output (scripts read them).
                bar.suspend(|| {
                    println!(
                        "n{} ready at {} ({} of {}, {:.1} s)",
                        n.id,
                        n.api(),
                        ready.iter().filter(|r| **r).count(),
                        nodes.len(),
                        start.elapsed().as_secs_f64()
                    )
                });
            }
        }
        if ready.iter().all(|r| *r) {
            bar.finish();
            return Ok(());
        }
        if start.elapsed() >= limit {
            anyhow::bail!(
                "not ready within {} s: {}",
                limit.as_secs(),
                waiting(&ready).join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}
