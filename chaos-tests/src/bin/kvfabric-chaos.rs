//! `kvfabric-chaos`: one chaos run against real `kvfabric` processes; prints the summary table,
//! writes the JSON report, and exits 0 when the checker found no violation (or, with
//! `--expect KIND`, when it found a violation of that kind: the planted-bug self-checks).
//!
//! Exit codes: 0 pass, 1 violations (or an expected one missing), 2 usage, 3 the harness
//! itself failed (e.g. the cluster never became ready), 130 interrupted by SIGINT / SIGTERM
//! (faults healed, final checks cut short, processes and namespaces cleaned up, the report
//! written with what was checked; violations found before the interrupt still exit 1).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kvfabric_chaos_tests::history::FaultKind;
use kvfabric_chaos_tests::nemesis::Pace;
use kvfabric_chaos_tests::run::{run, Isolation, RunConfig};

/// Chaos and partition run of a kvfabric cluster.
#[derive(Parser, Debug)]
#[command(name = "kvfabric-chaos")]
struct Args {
    /// The kvfabric binary (default: `kvfabric` beside this binary).
    #[arg(long)]
    kvfabric: Option<PathBuf>,
    /// Seed of the workload and the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long to inject faults: `90s`, `30m` (the smoke default is 60s).
    #[arg(long, default_value = "60s")]
    duration: String,
    /// Nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Concurrent clients.
    #[arg(long, default_value_t = 6)]
    clients: u32,
    /// Bound on one client request, ms (past it the outcome is unknown).
    #[arg(long, default_value_t = 3000)]
    op_timeout_ms: u64,
    /// Replication factor.
    #[arg(long, default_value_t = 2)]
    replication: u32,
    /// Fault kinds, comma-separated (default: all): kill, kill_wipe, pause, isolate_leader,
    /// partition_halves, partition_asymmetric, loss, delay, corrupt_disk.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Node that serves flipped bytes (needs a `planted-bugs` build of kvfabric).
    #[arg(long)]
    lying_peer: Option<u64>,
    /// Planted bug to activate on every node: skip-verify, early-ack, stale-read; or on node 1
    /// only: diverging-replica (its directory replica drifts from the others'). Needs a
    /// `planted-bugs` build. skip-verify implies a lying peer (node 3) unless one is given.
    #[arg(long)]
    planted: Option<String>,
    /// Pass only if the checker finds a violation of this kind (planted-bug self-check).
    #[arg(long)]
    expect: Option<String>,
    /// Quiet time between faults, ms (min,max).
    #[arg(long, value_delimiter = ',', default_values_t = [1500u64, 3000])]
    quiet_ms: Vec<u64>,
    /// How long each fault is held, ms (min,max).
    #[arg(long, value_delimiter = ',', default_values_t = [2000u64, 5000])]
    hold_ms: Vec<u64>,
    /// Availability shortfalls: `judge` (violations, the default) or `report` (printed, not
    /// violations: for runs too short to hold enough operations per fault kind).
    #[arg(long, default_value = "judge", value_parser = ["judge", "report"])]
    availability: String,
    /// Bound on convergence after healing, seconds.
    #[arg(long, default_value_t = 60)]
    converge_s: u64,
    /// How nodes are separated: auto (namespaces where possible, else loopback), netns,
    /// loopback.
    #[arg(long, default_value = "auto")]
    isolation: String,
    /// The JSON report.
    #[arg(long, default_value = "chaos-report.json")]
    report: PathBuf,
    /// Keep the run directory (logs, data) even when the run passed.
    #[arg(long)]
    keep: bool,
}

fn duration(s: &str) -> Option<Duration> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    Some(Duration::from_secs(match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return None,
    }))
}

fn kind(name: &str) -> Option<FaultKind> {
    serde_json::from_value(serde_json::Value::String(name.trim().to_owned())).ok()
}

fn usage(msg: String) -> ! {
    eprintln!("kvfabric-chaos: error: {msg}");
    std::process::exit(2)
}

fn main() {
    let a = Args::parse();
    let Some(dur) = duration(&a.duration) else {
        usage(format!(
            "--duration: expected e.g. 90s or 30m, found {:?}",
            a.duration
        ))
    };
    let kinds: Vec<FaultKind> = if a.faults.is_empty() {
        FaultKind::DRAWN.to_vec()
    } else {
        a.faults
            .iter()
            .map(|f| {
                kind(f)
                    .filter(|k| FaultKind::DRAWN.contains(k))
                    .unwrap_or_else(|| usage(format!("--faults: unknown kind {f:?}")))
            })
            .collect()
    };
    let (Some(&q0), Some(&q1), Some(&h0), Some(&h1)) = (
        a.quiet_ms.first(),
        a.quiet_ms.last(),
        a.hold_ms.first(),
        a.hold_ms.last(),
    ) else {
        usage("--quiet-ms and --hold-ms take MIN,MAX".into())
    };
    if a.nodes < 3 || a.nodes > 9 || a.replication == 0 || a.replication > a.nodes {
        usage("expected 3 to 9 nodes and 1 <= replication <= nodes".into());
    }
    if let Some(p) = &a.planted {
        if ![
            "skip-verify",
            "early-ack",
            "stale-read",
            "diverging-replica",
        ]
        .contains(&p.as_str())
        {
            usage(format!(
                "--planted: expected skip-verify, early-ack, stale-read or diverging-replica, found {p:?}"
            ));
        }
    }
    let lying_peer = a
        .lying_peer
        .or_else(|| (a.planted.as_deref() == Some("skip-verify")).then_some(u64::from(a.nodes)));
    let bin = a.kvfabric.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("kvfabric")))
            .unwrap_or_else(|| PathBuf::from("kvfabric"))
    });
    let cfg = RunConfig {
        bin,
        judge_availability: a.availability == "judge",
        seed: a.seed,
        duration: dur,
        nodes: a.nodes,
        clients: a.clients,
        op_timeout: Duration::from_millis(a.op_timeout_ms),
        replication: a.replication,
        pace: Pace {
            quiet_ms: (q0, q1.max(q0)),
            hold_ms: (h0, h1.max(h0)),
        },
        kinds,
        planted: a.planted.clone(),
        lying_peer,
        converge_bound: Duration::from_secs(a.converge_s),
        isolation: match a.isolation.as_str() {
            "auto" => Isolation::Auto,
            "netns" => Isolation::Netns,
            "loopback" => Isolation::Loopback,
            other => usage(format!(
                "--isolation: expected auto, netns or loopback, found {other:?}"
            )),
        },
        report: a.report.clone(),
        keep: a.keep,
    };
    let report = match run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kvfabric-chaos: error: {e:#}");
            std::process::exit(3)
        }
    };
    print!("{}", report.table());
    match serde_json::to_vec_pretty(&report) {
        Ok(j) => {
            if let Err(e) = std::fs::write(&a.report, j) {
                eprintln!("kvfabric-chaos: error: writing {}: {e}", a.report.display());
                std::process::exit(3)
            }
            println!("report: {}", a.report.display());
        }
        Err(e) => eprintln!("kvfabric-chaos: error: encoding the report: {e}"),
    }
    if !report.passed() && a.expect.is_none() {
        println!("run directory kept: {}", report.dir);
    }
    if report.interrupted {
        println!("interrupted: the checks above cover only what ran before the signal");
        std::process::exit(if report.passed() { 130 } else { 1 })
    }
    let ok = match &a.expect {
        None => report.passed(),
        Some(k) => {
            let found = report.violations_by_kind.get(k).copied().unwrap_or(0);
            println!(
                "expected violations of kind {k}: {}",
                if found > 0 {
                    format!("caught ({found})")
                } else {
                    "NOT caught".into()
                }
            );
            if found > 0 && !a.keep {
                // The violations were the point of the run: nothing to keep for a post-mortem.
                let _ = std::fs::remove_dir_all(&report.dir);
            }
            found > 0
        }
    };
    std::process::exit(if ok { 0 } else { 1 })
}
