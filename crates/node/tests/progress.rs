//! Progress of long commands (`kvfabric-progress`): `cluster up` draws a bar of the nodes
//! ready on a terminal, and no control characters at all when it has none, so that logs and
//! tests stay clean.

mod cluster_harness;

use std::process::{Command, Stdio};

use cluster_harness::{init_tracing, kvfabric};

fn down(dir: &std::path::Path) {
    let out = kvfabric()
        .command()
        .args(["cluster", "down", "--dir"])
        .arg(dir)
        .output()
        .expect("running cluster down");
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn cluster_up_writes_plain_lines_when_stderr_is_not_a_terminal() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = kvfabric()
        .command()
        .args([
            "cluster",
            "up",
            "--nodes",
            "2",
            "--timeout-s",
            "120",
            "--dir",
        ])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("running cluster up");
    down(dir.path());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains('\x1b') && !text.contains('\r'),
            "control characters without a terminal: {text:?}"
        );
    }
    assert!(!stderr.contains("nodes ready"), "a bar was drawn: {stderr}");
    assert!(stdout.contains("n1 ready at"), "{stdout}");
    assert!(stdout.contains("n2 ready at"), "{stdout}");
}

#[test]
fn cluster_up_draws_a_bar_on_a_terminal() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    // script(1) runs the command on a pseudo-terminal and copies what it drew to its stdout.
    let cmd = format!(
        "{} cluster up --nodes 2 --timeout-s 120 --dir {}",
        kvfabric().path().display(),
        dir.path().display()
    );
    let out = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("running script(1) (util-linux)");
    down(dir.path());
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{drawn}");
    assert!(drawn.contains("cluster up"), "{drawn}");
    assert!(drawn.contains("nodes ready"), "no bar: {drawn}");
    assert!(drawn.contains("left"), "no time left shown: {drawn}");
    assert!(drawn.contains("n2 ready at"), "{drawn}");
    // The result lines reach the terminal too.
    assert!(drawn.contains("ready; stop with"), "{drawn}");
}
