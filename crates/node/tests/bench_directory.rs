//! `kvfabric bench directory` with a tiny record count: a real 3-node cluster driven through
//! the nodes' HTTP API (every claim committed, every lookup resolved to its block and owner,
//! or the bench fails) against etcd through gRPC; it prints the table and, last, the two ratio
//! lines; it stops every process it started and removes its working directory. Its members run
//! on one thread each (`--member-threads 1`: one worker per node serves the whole path). Runs
//! the etcd side only where `etcd` is installed (`--skip-etcd` otherwise, and the ratios are
//! `n/a`).

mod procs;

use std::path::Path;
use std::process::Command;

fn etcd_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("etcd").is_file()))
}

/// Pids of live processes whose command line mentions `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    procs::live_processes_matching(dir.as_os_str().as_encoded_bytes())
}

#[test]
fn bench_directory_prints_the_table_and_the_ratio_and_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("bench");
    let with_etcd = etcd_installed();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvfabric"));
    cmd.args(["bench", "directory", "--records", "2000", "--clients", "8"])
        .args(["--lookups", "200", "--member-threads", "1", "--dir"])
        .arg(&dir);
    if !with_etcd {
        cmd.arg("--skip-etcd");
    }
    let out = cmd.output().expect("running kvfabric bench directory");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {}\n{stdout}\n{stderr}",
        out.status
    );

    for row in [
        "registrations, 1 per request (records/s)",
        "registrations, 512 per request (records/s)",
        "lookup local p50 (us)",
        "lookup local p99 (us)",
        "lookup linearizable p50 (us)",
        "lookup linearizable p99 (us)",
        "kvfabric memory per entry:",
        "Raft over QUIC",
        "kvfabric: 2000 records committed",
        "members: 1 thread(s) each on both sides",
    ] {
        assert!(stdout.contains(row), "missing {row:?} in\n{stdout}");
    }
    let lines: Vec<&str> = stdout.lines().collect();
    let [.., one, batched] = lines[..] else {
        panic!("fewer than two lines:\n{stdout}");
    };
    let one = one
        .strip_prefix("ratio registrations_over_etcd_grpc ")
        .unwrap_or_else(|| panic!("second to last line: {one:?}"));
    let batched = batched
        .strip_prefix("ratio batched_registrations_over_etcd_txn ")
        .unwrap_or_else(|| panic!("last line: {batched:?}"));
    for value in [one, batched] {
        if with_etcd {
            let v: f64 = value.parse().expect("a number");
            assert!(v > 0.0, "{value}\n{stdout}");
        } else {
            assert_eq!(value, "n/a");
        }
    }
    if with_etcd {
        assert!(stdout.contains("etcd: 2000 puts in"), "{stdout}");
    } else {
        assert!(stdout.contains("etcd: skipped (--skip-etcd)"), "{stdout}");
    }

    assert!(!dir.exists(), "{} is removed without --keep", dir.display());
    let left = processes_naming(&dir);
    assert!(left.is_empty(), "processes left: {left:?}");
}
