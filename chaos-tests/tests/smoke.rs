//! Smoke test of the harness end to end: `kvfabric-chaos` runs a real 3-node cluster for 15 s
//! of kills, partitions and delay, and must report operations, the faults it injected and zero
//! violations, in the table and in the JSON report.
//!
//! Needs the `kvfabric` binary in the same target directory (`cargo test --workspace` builds
//! it; alone, run `cargo build -p kvfabric-node` first) or at `KVFABRIC_BIN`.

use std::path::PathBuf;
use std::process::Command;

fn kvfabric() -> PathBuf {
    if let Some(p) = std::env::var_os("KVFABRIC_BIN") {
        return PathBuf::from(p);
    }
    let chaos = PathBuf::from(env!("CARGO_BIN_EXE_kvfabric-chaos"));
    let p = chaos.with_file_name("kvfabric");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build -p kvfabric-node` or set KVFABRIC_BIN",
        p.display()
    );
    p
}

#[test]
fn a_short_run_injects_faults_and_finds_no_violation() {
    let dir = std::env::temp_dir().join(format!("kvfc-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kvfabric-chaos"))
        .arg("--kvfabric")
        .arg(kvfabric())
        .args([
            "--seed",
            "3",
            "--duration",
            "15s",
            "--faults",
            "kill,partition_halves,delay",
            // One fault per kind gives windows of a few operations, where one slow request is
            // the p99: availability is printed here and judged by the long run (safety is
            // judged either way).
            "--availability",
            "report",
            "--report",
        ])
        .arg(&report)
        .output()
        .expect("running kvfabric-chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kvfabric-chaos failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("PASS: 0 violations (reproduce: --seed 3)"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the JSON report")).unwrap();
    assert_eq!(v["seed"], 3);
    let puts_ok = v["operations"]["put"]["ok"].as_u64().unwrap_or(0);
    assert!(puts_ok > 0, "no put succeeded: {}", v["operations"]);
    let faults: u64 = v["faults"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(faults >= 2, "faults injected: {}", v["faults"]);
    for kind in [
        "wrong_read",
        "lost_acked_block",
        "not_linearizable",
        "not_converged",
    ] {
        assert_eq!(v["violations_by_kind"][kind], 0, "{kind}");
    }
    assert!(v["converged_s"].as_f64().is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGINT mid-run: the harness heals, cuts its checks short, stops every node, removes its
/// namespaces, writes a report that says so, and exits 130.
#[test]
fn an_interrupted_run_cleans_up_reports_and_exits_130() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = std::env::temp_dir().join(format!("kvfc-int-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvfabric-chaos"))
        .arg("--kvfabric")
        .arg(kvfabric())
        .args([
            "--seed",
            "4",
            "--duration",
            "300s",
            "--faults",
            "pause",
            // Two seconds of one fault window: availability is printed, not judged (the
            // test is about the interrupt; safety violations would still exit 1).
            "--availability",
            "report",
            "--report",
        ])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kvfabric-chaos");
    let pid = child.id();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("kvfabric-chaos ended before the cluster was ready:\n{seen}");
        }
        seen.push_str(&line);
        if line.contains("cluster ready") {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: sends a signal to the child we started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    let started = std::time::Instant::now();
    // Drain stderr so the child never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    let status = child.wait().unwrap();
    let rest = drain.join().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?} after the signal",
        started.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{status}:\n{seen}{rest}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the JSON report")).unwrap();
    assert_eq!(v["interrupted"], true);
    assert!(v["ran_s"].as_f64().unwrap() < 300.0);
    // No namespace of this run is left behind (where the run had any).
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        let list = String::from_utf8_lossy(&out.stdout);
        let tag = format!("kvfc{}n", pid % 100_000);
        assert!(!list.contains(&tag), "namespaces left: {list}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
