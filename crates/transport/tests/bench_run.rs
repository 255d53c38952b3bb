//! The transport bench in a tiny configuration (`--blocks 2 --rounds 2`), through
//! [`kvfabric_transport::bench::run`]: loopback rows always, the veth rows at both MTUs when
//! run as root (CI), their skip line otherwise; every closing ratio line present, numeric
//! where its rows ran; no server process and no network namespace left behind. No timing
//! assertions. This test binary is also the bench's child processes (`--serve`,
//! `--veth-client`), as the cargo bench target is.

use kvfabric_transport::bench::{self, veth_path, BenchReport, VethRows, LOOPBACK, VETH_MTUS};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--serve" || a == "--veth-client") {
        if let Err(e) = bench::run(&args, &[]) {
            eprintln!("bench child: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    let opts: Vec<String> = ["--blocks", "2", "--rounds", "2", "--skip-stock"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let report = bench::run(&opts, &[]).expect("the tiny bench runs");
    check(&report);
    let pid = std::process::id();
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        !left.contains(&format!("kvfb-{pid}-")),
        "namespaces left: {left}"
    );
    println!("bench_run: ok ({:?})", report.veth);
}

/// The rows and the closing lines of a tiny run.
fn check(report: &BenchReport) {
    let mut paths = vec![LOOPBACK.to_string()];
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match &report.veth {
        VethRows::Ran => paths.extend(VETH_MTUS.map(veth_path)),
        VethRows::Skipped(why) => {
            assert!(!root, "root, yet the veth rows were skipped: {why}");
            assert!(why.contains("not root"), "{why}");
        }
        VethRows::NotApplicable => panic!("a measuring run says whether veth ran"),
    }
    for path in &paths {
        for phase in ["b", "t", "a", "c"] {
            let gbps = report
                .gbps(path, phase)
                .unwrap_or_else(|| panic!("no ({phase}) row on {path}: {report:?}"));
            assert!(gbps.is_finite() && gbps > 0.0, "{path} ({phase}): {gbps}");
        }
    }
    let lines = report.summary_lines();
    let value = |name: &str| -> String {
        let prefix = format!("ratio {name} ");
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no `ratio {name}` line in {lines:?}"))
            .to_string()
    };
    for name in [
        "quic_veth_over_tcp",
        "quic_veth_over_tls_tcp",
        "quic_veth9000_over_tcp",
        "quic_veth9000_over_tls_tcp",
    ] {
        let v = value(name);
        match report.veth {
            VethRows::Ran => {
                let x: f64 = v.parse().unwrap_or_else(|e| panic!("{name} {v:?}: {e}"));
                assert!(x.is_finite() && x > 0.0, "{name} {x}");
            }
            _ => assert_eq!(v, "n/a", "{name}"),
        }
    }
    let x: f64 = value("quic_over_tls_tcp").parse().expect("numeric");
    assert!(x > 0.0);
    let last = lines.last().expect("closing lines");
    let x: f64 = last
        .strip_prefix("ratio quic_over_tcp ")
        .unwrap_or_else(|| panic!("last line {last:?}"))
        .parse()
        .expect("numeric");
    assert!(x > 0.0);
}
