//! `kvfabric bench reuse` with a small workload: three fresh clusters (one per policy), the
//! table with a row per policy, the ratio line last, and no process left running.

mod procs;

use std::path::Path;
use std::process::Command;

/// Pids of live processes whose command line mentions `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    procs::live_processes_matching(dir.as_os_str().as_encoded_bytes())
}

#[test]
fn bench_reuse_prints_a_row_per_policy_and_the_ratio_last_and_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("bench");
    let out = Command::new(env!("CARGO_BIN_EXE_kvfabric"))
        .args([
            "bench", "reuse", "--agents", "5", "--docs", "2", "--seed", "3",
        ])
        .args(["--model", "deepseek-v2-lite", "--dir"])
        .arg(&dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("running kvfabric bench reuse");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {}\n{stdout}\n{stderr}",
        out.status
    );
    for head in [
        "hit ratio",
        "tokens recomputed",
        "fetched by engines",
        "transport bytes in",
        "ttfb p50 (ms)",
        "ttfb p99 (ms)",
    ] {
        assert!(stdout.contains(head), "missing {head:?} in\n{stdout}");
    }
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("policy "))
        .collect();
    for policy in ["round-robin", "prefix", "kvfabric"] {
        let row = table
            .iter()
            .find(|l| l.split_whitespace().next() == Some(policy))
            .unwrap_or_else(|| panic!("no {policy} row in\n{stdout}"));
        let hit: f64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!((0.0..=1.0).contains(&hit), "{row}");
    }
    let last = stdout.lines().last().expect("a last line");
    let value: f64 = last
        .strip_prefix("ratio recompute_kvfabric_over_prefix ")
        .unwrap_or_else(|| panic!("last line: {last:?}"))
        .parse()
        .expect("a number");
    assert!(value > 0.0 && value <= 1.0, "{last}");
    assert!(
        processes_naming(&dir).is_empty(),
        "processes left: {:?}",
        processes_naming(&dir)
    );
}
