//! `kvfabric bench node` with tiny counts: the table has a row per server and client count,
//! the ratio lines come last and parse, `--plot` writes a PNG, and no node process is left
//! when it returns.

use std::process::Command;

#[test]
fn bench_node_prints_every_row_and_its_ratio_lines_and_stops_its_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("bench");
    let out = Command::new(env!("CARGO_BIN_EXE_kvfabric"))
        .args([
            "bench",
            "node",
            "--blocks",
            "2",
            "--rounds",
            "1",
            "--clients",
            "1,2",
        ])
        .arg("--dir")
        .arg(&work)
        .arg("--keep")
        .arg("--plot")
        .arg(dir.path().join("node.png"))
        .output()
        .expect("running kvfabric");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for server in ["baseline", "standalone", "cluster-r2"] {
        for clients in [1, 2] {
            let row = stdout
                .lines()
                .find(|l| {
                    let mut w = l.split_whitespace();
                    w.next() == Some(server) && w.next() == Some(&clients.to_string())
                })
                .unwrap_or_else(|| panic!("no row for {server} with {clients}: {stdout}"));
            let gbps: Vec<f64> = row
                .split('|')
                .skip(1)
                .map(|f| f.split_whitespace().next().unwrap().parse().unwrap())
                .collect();
            assert!(gbps.iter().all(|g| *g > 0.0), "{row}");
        }
    }
    assert!(
        stdout.contains("scaling standalone: 2 clients over 1: PUT "),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let last = &lines[lines.len() - 2..];
    for (line, name) in last
        .iter()
        .zip(["node_put_over_baseline", "node_get_over_baseline"])
    {
        let v: f64 = line
            .strip_prefix(&format!("ratio {name} "))
            .unwrap_or_else(|| panic!("expected `ratio {name} <float>`, found {line:?}"))
            .parse()
            .unwrap();
        assert!(v.is_finite() && v > 0.0, "{line}");
    }
    let png = std::fs::read(dir.path().join("node.png")).expect("the plot is written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Every node it started is gone: nothing runs with one of its configs.
    let configs: Vec<String> = [
        "standalone/node.toml",
        "cluster/node1.toml",
        "cluster/node2.toml",
        "cluster/node3.toml",
    ]
    .iter()
    .map(|c| work.join(c).display().to_string())
    .collect();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_none_or(|(_, r)| r.trim_start().starts_with(['Z', 'X']));
        for arg in cmdline.split(|b| *b == 0) {
            assert!(
                zombie || !configs.iter().any(|c| c.as_bytes() == arg),
                "a node still runs: {}",
                String::from_utf8_lossy(&cmdline)
            );
        }
    }
}
