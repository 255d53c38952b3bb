//! One chaos run end to end: lay out a cluster under a run directory, start the relays and the
//! node processes, run the workload under the nemesis for the asked duration, heal, wait for
//! convergence, probe what every node holds, check the history, and report.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use kvfabric_progress::{Progress, Unit};

use crate::checker::{check_with, FinalState};
use crate::client::Client;
use crate::client::Outcome;
use crate::history::{Fault, FaultKind, Recorder, Request};
use crate::layout::{self, Addressing, NodeSettings};
use crate::nemesis::{self, Pace};
use crate::netns::{self, Netns};
use crate::nodes::{self, Nodes};
use crate::relay::NodeOf;
use crate::relay::{Net, Relay};
use crate::report::Report;
use crate::rng::Rng;
use crate::timeline::Timeline;
use crate::workload::Workload;
use std::net::IpAddr;
use std::sync::Arc;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The `kvfabric` binary.
    pub bin: PathBuf,
    /// Whether availability shortfalls are violations (else only reported).
    pub judge_availability: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// How long faults are injected.
    pub duration: Duration,
    /// Nodes.
    pub nodes: u32,
    /// Concurrent clients.
    pub clients: u32,
    /// Bound on one client request (past it the outcome is unknown).
    pub op_timeout: Duration,
    /// Replication factor.
    pub replication: u32,
    /// Nemesis pace.
    pub pace: Pace,
    /// Fault kinds the nemesis draws from.
    pub kinds: Vec<FaultKind>,
    /// Planted bug active on every node (`KVFABRIC_PLANTED`), if any.
    pub planted: Option<String>,
    /// Node that serves flipped bytes (needs a `planted-bugs` build).
    pub lying_peer: Option<u64>,
    /// Bound on convergence after healing.
    pub converge_bound: Duration,
    /// How nodes are separated.
    pub isolation: Isolation,
    /// Where to write the JSON report.
    pub report: PathBuf,
    /// Keep the run directory (logs, data) afterwards.
    pub keep: bool,
}

/// How nodes are separated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Namespaces where this machine allows them, else loopback (said on stderr).
    Auto,
    /// Namespaces, or fail.
    Netns,
    /// Loopback and the relay.
    Loopback,
}

type Upstream = Arc<dyn Fn(Option<u64>) -> IpAddr + Send + Sync>;

/// Sets up namespaces when asked for and possible; `None`: loopback.
fn choose_isolation(want: Isolation, nodes: u32) -> anyhow::Result<Option<Arc<Netns>>> {
    if want == Isolation::Loopback {
        return Ok(None);
    }
    let removed = netns::reap_leftovers();
    if removed > 0 {
        eprintln!("kvfabric-chaos: removed {removed} namespaces or bridges left by an earlier run");
    }
    let made = netns::probe().and_then(|()| Netns::create(nodes));
    match (made, want) {
        (Ok(n), _) => Ok(Some(Arc::new(n))),
        (Err(e), Isolation::Netns) => Err(e.context("--isolation netns")),
        (Err(e), _) => {
            eprintln!(
                "kvfabric-chaos: network namespaces are not available here ({e:#}); running on loopback with the fault-injecting relay"
            );
            Ok(None)
        }
    }
}

/// Runs once; the report says whether it passed.
pub fn run(cfg: &RunConfig) -> anyhow::Result<Report> {
    nemesis::install_signal_handlers();
    std::fs::create_dir_all(nodes::RUNS_DIR)?;
    let dir =
        PathBuf::from(nodes::RUNS_DIR).join(format!("run-{}-seed{}", std::process::id(), cfg.seed));
    let reaped = nodes::reap_leftovers(&dir);
    if reaped > 0 {
        eprintln!("kvfabric-chaos: killed {reaped} node processes left by an earlier run");
    }
    std::fs::create_dir_all(dir.join("models"))?;
    std::fs::write(dir.join("harness.pid"), std::process::id().to_string())?;
    std::fs::write(dir.join("models").join("tiny-mla.toml"), layout::MODEL_TOML)?;
    let out = Command::new(&cfg.bin)
        .args(["certs", "--nodes", &cfg.nodes.to_string(), "--out"])
        .arg(dir.join("certs"))
        .output()
        .with_context(|| format!("running {} certs", cfg.bin.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "kvfabric certs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let netns = choose_isolation(cfg.isolation, cfg.nodes)?;
    let addressing = match &netns {
        Some(n) => {
            let IpAddr::V4(v) = n.relay_ip() else {
                anyhow::bail!("the bridge address is not IPv4")
            };
            let o = v.octets();
            Addressing::Netns {
                subnet: [o[0], o[1], o[2]],
                relay: n.relay_ip(),
            }
        }
        None => Addressing::Loopback,
    };
    let plan = layout::plan(&dir, cfg.nodes, addressing)?;
    let settings = NodeSettings {
        replication: cfg.replication,
        lease_ms: 4000,
    };
    for n in &plan {
        std::fs::write(&n.config, layout::config_text(&dir, n, &plan, settings))?;
    }
    let (net, node_of, upstream): (Net, NodeOf, Upstream) = match &netns {
        Some(ns) => {
            let ns = ns.clone();
            let (a, b, c) = (ns.clone(), ns.clone(), ns);
            let relay_ip = a.relay_ip();
            (
                Net::with_firewall(Arc::new(move |r| a.apply(r))),
                Arc::new(move |ip| b.node_of(ip)),
                Arc::new(move |from| from.map_or(relay_ip, |f| c.upstream_ip(f))),
            )
        }
        None => (
            Net::default(),
            Arc::new(layout::node_of),
            Arc::new(|from: Option<u64>| match from {
                Some(f) => layout::listen_ip(f),
                None => IpAddr::from([127, 0, 0, 1]),
            }),
        ),
    };
    let mut relays = Vec::new();
    for n in &plan {
        for (adv, target) in [(n.transport, n.transport_listen), (n.raft, n.raft_listen)] {
            let relay = Relay::start(
                &net,
                n.id,
                adv,
                target,
                node_of.clone(),
                upstream.clone(),
                cfg.seed ^ n.id,
            );
            relays.push(relay.with_context(|| format!("relay for n{} on {adv}", n.id))?);
        }
    }
    let planted: Vec<Option<String>> = plan
        .iter()
        .map(|n| {
            // A replica that drifts needs others that do not: that bug goes to node 1 only.
            let mut p: Vec<&str> = cfg
                .planted
                .iter()
                .map(String::as_str)
                .filter(|b| *b != DIVERGING_REPLICA || n.id == 1)
                .collect();
            if cfg.lying_peer == Some(n.id) {
                p.push("lying-peer");
            }
            (!p.is_empty()).then(|| p.join(","))
        })
        .collect();
    let apis: Vec<String> = plan.iter().map(|n| n.api()).collect();
    let mut nodes = Nodes::new(cfg.bin.clone(), plan, planted);
    if let Some(ns) = &netns {
        nodes = nodes.in_namespaces(
            (1..=u64::from(cfg.nodes))
                .map(|i| ns.namespace(i))
                .collect(),
        );
    }
    let isolation = if netns.is_some() {
        "netns+nftables+relay"
    } else {
        "loopback+relay"
    };
    let result = drive(cfg, &mut nodes, &net, &apis, &dir).map(|mut r| {
        r.isolation = isolation.into();
        if let Some(ns) = &netns {
            r.packets.insert("dropped by nftables".into(), ns.dropped());
        }
        r
    });
    nodes.stop_all();
    net.stop();
    for r in relays {
        r.join();
    }
    drop(netns);
    let report = result?;
    if !cfg.keep && report.passed() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(report)
}

fn drive(
    cfg: &RunConfig,
    nodes: &mut Nodes,
    net: &Net,
    apis: &[String],
    dir: &std::path::Path,
) -> anyhow::Result<Report> {
    let client = Client::new(Duration::from_secs(5));
    for id in 1..=nodes.len() as u64 {
        nodes.start(id)?;
    }
    let ready = nodes::wait_for(Duration::from_secs(120), || {
        apis.iter().all(|a| client.ready(a)).then_some(())
    });
    if ready.is_none() {
        anyhow::ensure!(
            !nemesis::interrupted(),
            "interrupted while waiting for the cluster to become ready"
        );
        anyhow::bail!(
            "the cluster did not become ready within 120 s; n1's log ends:\n{}",
            nodes.log_tail(1, 20)
        );
    }
    eprintln!(
        "kvfabric-chaos: cluster ready; injecting faults for {:.0} s",
        cfg.duration.as_secs_f64()
    );
    let mut rng = Rng::new(cfg.seed);
    let rec = Recorder::new();
    if let Some(l) = cfg.lying_peer {
        rec.fault(Fault {
            kind: FaultKind::LyingPeer,
            nodes: vec![l],
            hit_leader: false,
            start_ms: 0.0,
            end_ms: cfg.duration.as_secs_f64() * 1000.0,
            detail: "serves every block with a byte flipped".into(),
            in_memory: Vec::new(),
            snapshot_ms: 0.0,
        });
    }
    let timeline = Timeline::start(apis.to_vec(), rec.clone(), dir)?;
    let workload = Workload::start(
        cfg.clients,
        apis.to_vec(),
        rec.clone(),
        &mut rng,
        cfg.op_timeout,
    );
    let deadline_ms = cfg.duration.as_secs_f64() * 1000.0;
    let bar = Progress::clock("kvfabric-chaos", cfg.duration);
    nemesis::run(
        nodes,
        net,
        &rec,
        &mut rng,
        cfg.pace,
        &cfg.kinds,
        deadline_ms,
        &bar,
    );
    bar.finish();
    let ran_s = rec.now_ms() / 1000.0;
    let healed_at = Instant::now();
    eprintln!(
        "kvfabric-chaos: faults healed after {ran_s:.0} s{}; final checks (convergence, probes of every acknowledged block)",
        if nemesis::interrupted() { " (interrupted)" } else { "" }
    );
    // Let the clients see the healed cluster for a moment, then stop them.
    nemesis::sleep_interruptible(3_000);
    workload.stop();
    timeline.stop();
    let history = rec.snapshot();
    let mut end = settle(&history, &client, apis, healed_at, cfg.converge_bound);
    end.rotted = nodes.rotted_copies();
    let checked = check_with(&history, &end, cfg.judge_availability);
    let mut report = Report::new(cfg, &history, &end, checked, net, dir);
    report.ran_s = ran_s;
    if !report.passed() || cfg.keep {
        // The whole history beside the logs, for the failing seed's post-mortem.
        std::fs::write(dir.join("history.json"), serde_json::to_vec(&history)?)?;
    }
    Ok(report)
}

/// Waits for convergence (every node names the same leader; for a sample of acknowledged
/// blocks, the directory's live owners equal the nodes that hold them), then probes every
/// acknowledged block on every node and looks every chunk key up. Interrupted (SIGINT /
/// SIGTERM), it stops where it is: what was probed is checked, the rest is left out (the
/// checker skips blocks and keys it has no final state for), and convergence is not judged.
fn settle(
    h: &crate::history::Recorded,
    client: &Client,
    apis: &[String],
    healed_at: Instant,
    bound: Duration,
) -> FinalState {
    let acked: Vec<(String, String)> = h
        .ops
        .iter()
        .filter_map(|o| match (&o.request, &o.outcome) {
            (Request::Put { key, .. }, Outcome::Put { block, .. }) => {
                Some((key.clone(), block.clone()))
            }
            _ => None,
        })
        .collect();
    // The newest blocks and an even spread of older ones.
    let sample: Vec<&(String, String)> = if acked.len() <= 200 {
        acked.iter().collect()
    } else {
        let step = acked.len() / 100;
        acked[acked.len() - 100..]
            .iter()
            .chain(acked.iter().step_by(step).take(100))
            .collect()
    };
    let mut note = String::new();
    let converged = nodes::wait_for(bound, || {
        let leaders: Vec<Option<u64>> = apis
            .iter()
            .map(|a| client.leader(a).and_then(|(l, _)| l))
            .collect();
        if leaders.iter().any(Option::is_none) || leaders.windows(2).any(|w| w[0] != w[1]) {
            note = format!("leaders named: {leaders:?}");
            return None;
        }
        for (key, block) in &sample {
            let holders = holders_of(client, apis, block);
            let owners = match client.lookup(&apis[0], key) {
                // The key no longer resolves (its mapping was dropped): the owners of its
                // block cannot be read over HTTP; counted as a finding by the checker.
                Outcome::Looked { block: None, .. } => continue,
                Outcome::Looked { owners, .. } => owners,
                other => {
                    note = format!("lookup of {key}: {other:?}");
                    return None;
                }
            };
            let held: Vec<String> = holders.iter().map(|n| format!("n{n}")).collect();
            if owners != held {
                note = format!("block {block}: directory owners {owners:?}, holders {held:?}");
                return None;
            }
        }
        Some(healed_at.elapsed().as_secs_f64())
    });
    let (replicas_at, replicas_diverged) = match converged {
        Some(_) => compare_replicas(client, apis),
        None => (None, None),
    };
    let mut holders = BTreeMap::new();
    let mut mapped = BTreeMap::new();
    let bar = Progress::new(
        "kvfabric-chaos probes",
        acked.len() as u64,
        Unit::Items("acknowledged blocks"),
    );
    bar.message("every node's HEAD and a lookup of each key");
    for (key, block) in &acked {
        if nemesis::interrupted() {
            break;
        }
        bar.inc(1);
        holders.insert(block.clone(), holders_of(client, apis, block));
        let m = match client.lookup(&apis[0], key) {
            Outcome::Looked { block, .. } => Some(block),
            _ => None,
        };
        if let Some(m) = m {
            mapped.insert(key.clone(), m);
        }
    }
    bar.finish();
    // Keys whose put was not acknowledged may still be mapped (unknown outcome).
    for o in &h.ops {
        if nemesis::interrupted() {
            break;
        }
        if let Request::Put { key, .. } = &o.request {
            if !mapped.contains_key(key) {
                if let Outcome::Looked { block, .. } = client.lookup(&apis[0], key) {
                    mapped.insert(key.clone(), block);
                }
            }
        }
    }
    FinalState {
        holders,
        mapped,
        converged_s: converged,
        converge_bound_s: bound.as_secs_f64(),
        converge_note: note,
        interrupted: nemesis::interrupted(),
        rotted: BTreeMap::new(),
        replicas_at,
        replicas_diverged,
    }
}

/// The planted bug that makes node 1's directory replica drift from the others'.
const DIVERGING_REPLICA: &str = "diverging-replica";

/// Bound on finding a moment where every node's directory replica applied the same entry
/// (lease renewals keep the log moving, about one entry a second per three nodes).
const REPLICAS_SAME_ENTRY_S: u64 = 15;

/// Asks every node for its directory replica's digest until all name the same applied entry;
/// that entry, and each node's digest when they differ there.
fn compare_replicas(client: &Client, apis: &[String]) -> (Option<String>, Option<String>) {
    let same = nodes::wait_for(Duration::from_secs(REPLICAS_SAME_ENTRY_S), || {
        let d: Vec<(String, String)> = apis
            .iter()
            .map(|a| client.directory_digest(a))
            .collect::<Option<_>>()?;
        d.windows(2).all(|w| w[0].0 == w[1].0).then_some(d)
    });
    let Some(d) = same else {
        return (None, None);
    };
    let at = d[0].0.clone();
    if d.windows(2).all(|w| w[0].1 == w[1].1) {
        return (Some(at), None);
    }
    let each: Vec<String> = d
        .iter()
        .enumerate()
        .map(|(i, (_, digest))| format!("n{} {digest}", i + 1))
        .collect();
    (Some(at), Some(each.join(", ")))
}

fn holders_of(client: &Client, apis: &[String], block: &str) -> Vec<u64> {
    apis.iter()
        .enumerate()
        .filter(|(_, a)| client.holds(a, block) == Some(true))
        .map(|(i, _)| i as u64 + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Op, Recorded};
    use std::sync::atomic::Ordering;

    /// With the signal in, the final phase gives up at once on a cluster that would never
    /// converge (nothing listens), judges nothing it did not probe, and says so.
    #[test]
    fn an_interrupt_cuts_the_final_phase_short() {
        let put = Op {
            client: 0,
            node: 1,
            request: Request::Put {
                seed: 1,
                key: "11".repeat(32),
            },
            invoke_ms: 0.0,
            complete_ms: 1.0,
            outcome: Outcome::Put {
                block: "aa".repeat(32),
                replicas: 2,
                holders: vec![1, 2],
            },
        };
        let h = Recorded {
            ops: vec![put],
            faults: vec![],
        };
        let apis = vec!["http://127.0.0.1:1".to_owned()];
        let client = Client::new(Duration::from_millis(200));
        nemesis::INTERRUPTED.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let end = settle(&h, &client, &apis, started, Duration::from_secs(60));
        nemesis::INTERRUPTED.store(false, Ordering::SeqCst);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
        assert!(end.interrupted);
        assert_eq!(end.converged_s, None);
        assert!(end.holders.is_empty() && end.mapped.is_empty());
        let checked = crate::checker::check(&h, &end);
        assert!(checked.violations.is_empty(), "{:?}", checked.violations);
    }
}
