//! `kvfabric demo`: the real command, a real 3-node cluster of processes. It reports more
//! tokens reused than a prefix-only cache, every read equal to the engine's bytes, no dedup
//! collision, at least one copy of every block; and it leaves no node process and no directory
//! behind, also when interrupted with SIGINT (Ctrl-C).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on one demo run in these tests.
const RUN_LIMIT: Duration = Duration::from_secs(180);

fn kvfabric(tmp: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kvfabric"));
    c.env("TMPDIR", tmp)
        .env_remove("KVFABRIC_NODE")
        .env_remove("KVFABRIC_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `c` to completion within [`RUN_LIMIT`]: (success, stdout, stderr).
fn run(mut c: Command) -> (bool, String, String) {
    let child = c.spawn().expect("starting kvfabric demo");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(RUN_LIMIT) {
        Ok(o) => o.expect("waiting for kvfabric demo"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("kvfabric demo ran past {RUN_LIMIT:?}");
        }
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The first figure of the report row labelled `label` (digit grouping removed).
fn figure(report: &str, label: &str) -> f64 {
    report
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|v| v.replace(',', ""))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no figure for {label:?} in:\n{report}"))
}

/// The directory `cluster up` reported.
fn cluster_dir(stdout: &str) -> PathBuf {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("starting 3 nodes in "))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no cluster directory in:\n{stdout}"))
}

/// Pids of live processes whose command line mentions `dir`.
fn processes_under(dir: &Path) -> Vec<String> {
    let want = dir.as_os_str().as_encoded_bytes();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next().map(str::to_owned))
            })
            .is_none_or(|st| st == "Z" || st == "X");
        if !zombie && cmdline.windows(want.len()).any(|w| w == want) {
            out.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline)));
        }
    }
    out
}

#[test]
fn demo_reuses_shared_documents_across_nodes_and_leaves_nothing_running() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = kvfabric(tmp.path());
    c.args(["demo", "--agents", "6", "--seed", "3"]);
    let start = Instant::now();
    let (ok, out, err) = run(c);
    eprintln!("demo took {:.1} s", start.elapsed().as_secs_f64());
    assert!(ok, "demo failed:\n{out}\n{err}");
    assert!(out.contains("kvfabric demo report: deepseek-v3"), "{out}");
    assert!(out.contains("workload: 6 agents"), "{out}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with('[')).count(),
        6,
        "one progress line per agent:\n{err}"
    );

    let tokens = figure(&out, "prompt tokens, all agents");
    let prefix = figure(&out, "reused by a prefix-only cache");
    let reused = figure(&out, "reused by kvfabric");
    let computed = figure(&out, "computed (and put)");
    assert!(
        reused > prefix,
        "kvfabric reused {reused}, prefix-only {prefix}:\n{out}"
    );
    assert!(
        figure(&out, "of which shared documents") > 0.0,
        "documents behind different preambles were reused:\n{out}"
    );
    assert_eq!(reused + computed, tokens, "{out}");
    assert_eq!(figure(&out, "read mismatches"), 0.0, "{out}");
    assert_eq!(figure(&out, "dedup_collisions"), 0.0, "{out}");
    assert!(out.contains("collision 0"), "{out}");
    assert!(
        figure(&out, "copies per distinct block") >= 1.0,
        "min copies:\n{out}"
    );
    assert!(figure(&out, "bytes moved between nodes") > 0.0, "{out}");
    assert!(figure(&out, "blocks verified on receipt") > 0.0, "{out}");
    assert!(out.contains("valid only if the engine encodes chunks locally"));

    let dir = cluster_dir(&out);
    assert!(
        dir.starts_with(tmp.path().canonicalize().unwrap()),
        "{dir:?}"
    );
    assert!(out.contains("no node left running"), "{out}");
    assert!(!dir.exists(), "the temporary directory is removed");
    assert_eq!(processes_under(&dir), Vec::<String>::new());
}

#[test]
fn ctrl_c_stops_the_cluster_and_exits_non_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = kvfabric(tmp.path());
    c.args(["demo", "--agents", "16", "--parallel", "1"]);
    let mut child = c.spawn().expect("starting kvfabric demo");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut err = String::new();
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no agent finished in time:\n{err}"));
        err.push_str(&line);
        err.push('\n');
        if line.starts_with("[ 1/16]") {
            break;
        }
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) },
        0,
        "SIGINT"
    );
    let out = child.wait_with_output().expect("waiting for kvfabric demo");
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        err.push_str(&line);
        err.push('\n');
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{err}");
    assert!(
        err.contains("kvfabric: error:") && err.contains("interrupted"),
        "{err}"
    );
    assert!(err.contains("cluster stopped"), "{err}");
    let dir = cluster_dir(&stdout);
    assert!(stdout.contains("stopped 3 node(s)"), "{stdout}");
    assert_eq!(processes_under(&dir), Vec::<String>::new());
    assert!(
        !dir.exists(),
        "an interrupted demo removes its temporary directory"
    );
}

#[test]
fn a_non_empty_dir_is_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("precious"), b"x").unwrap();
    let mut c = kvfabric(tmp.path());
    c.args(["demo", "--dir"]).arg(tmp.path());
    let (ok, out, err) = run(c);
    assert!(!ok);
    assert!(err.contains("not empty"), "{err}");
    assert!(!out.contains("starting"), "{out}");
    assert!(tmp.path().join("precious").exists());
    assert!(!tmp.path().join("node1.toml").exists());
}
