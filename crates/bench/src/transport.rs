//! `kvfabric bench transport`: the transport crate's benchmark (`kvfabric_transport::bench`,
//! the same code as `cargo bench -p kvfabric-transport --bench bench_transport`): 4.5 MB
//! blocks between this process and a server process (this binary again, `bench transport
//! --serve DIR`) on loopback and, as root, across a veth pair between two network namespaces
//! (MTU 1500 and 9000; the client side is this binary again, `--veth-client`), QUIC (and UCX
//! on loopback when built with the `ucx` feature) against a plain TCP copy and against TCP +
//! rustls + blake3. It says `veth rows: skipped (REASON)` when it cannot make namespaces. The
//! closing ratio lines and their order are in `kvfabric_transport::bench`'s docs; the last is
//! always `ratio quic_over_tcp <value>` (loopback). `--plot FILE` (anywhere among the options)
//! draws what the run measured ([`bars`]); it is this command's own and never reaches the
//! bench's parser or its child processes.

use std::path::PathBuf;

use clap::Args;
use kvfabric_transport::bench::{BenchReport, VethRows};

use crate::plot::{Bar, PlotArg};

/// Arguments of `kvfabric bench transport`: `--plot FILE`, and the bench's own options,
/// passed through to its parser (one parser for both entry points), which rejects unknown
/// ones.
#[derive(Debug, Clone, Args)]
pub(crate) struct TransportArgs {
    #[command(flatten)]
    plot: PlotArg,
    /// Options: --blocks N (16), --rounds R (20), --inflight K (1), --get-inflight K (2, UCX
    /// get mode), --workers N (1),
    /// --server-workers N (1), --mtu B, --max-udp B, --stream-window B, --conn-window B,
    /// --send-window B, --socket-buffer B, --no-mtud, --gso, --fair, --no-adapt (configured
    /// QUIC settings on every path), --skip-stock, --no-veth, --veth-only; with the
    /// `ucx` feature --ucx-tls TLS, --ucx-shm-tls TLS (get mode over shared memory: sm,tcp),
    /// --ucx-chunk B, --ucx-posted N, --ucx-set NAME=VALUE.
    #[arg(
        value_name = "OPTIONS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    options: Vec<String>,
}

/// Runs `kvfabric bench transport` (or, with `--serve DIR`, its server process).
pub(crate) fn run(mut a: TransportArgs) -> anyhow::Result<()> {
    if let Some(file) = take_plot(&mut a.options)? {
        anyhow::ensure!(
            a.plot.file.is_none(),
            "--plot: expected it once, found it twice"
        );
        a.plot.file = Some(file);
    }
    a.plot.check()?;
    let report = kvfabric_transport::bench::run(&a.options, &["bench", "transport"])?;
    // A server or veth-client process has no summary of its own: nothing to draw.
    if report.veth == VethRows::NotApplicable {
        return Ok(());
    }
    a.plot
        .write_bars("kvfabric bench transport: 4.5 MB blocks", &bars(&report))
}

/// Takes `--plot FILE` or `--plot=FILE` out of the pass-through options.
fn take_plot(options: &mut Vec<String>) -> anyhow::Result<Option<PathBuf>> {
    let Some(i) = options
        .iter()
        .position(|o| o == "--plot" || o.starts_with("--plot="))
    else {
        return Ok(None);
    };
    let file = match options[i].strip_prefix("--plot=") {
        Some(f) => {
            let f = f.to_owned();
            options.remove(i);
            f
        }
        None => {
            anyhow::ensure!(
                i + 1 < options.len(),
                "--plot: expected a file name after it, found nothing"
            );
            options.remove(i);
            options.remove(i)
        }
    };
    anyhow::ensure!(
        !options
            .iter()
            .any(|o| o == "--plot" || o.starts_with("--plot=")),
        "--plot: expected it once, found it twice"
    );
    Ok(Some(PathBuf::from(file)))
}

/// The phases drawn, QUIC (the fabric's transport) first, then its baselines, then UCX
/// where it was built: (phase code, series name).
const SERIES: [(&str, &str); 5] = [
    ("a", "QUIC, verified"),
    ("b", "TCP copy (baseline)"),
    ("t", "TCP + rustls + blake3"),
    ("d", "UCX stream, verified"),
    ("g", "UCX get (shared memory), verified"),
];

/// The chart of what the run measured: GB/s on each path (loopback, veth at each MTU) of
/// each phase in [`SERIES`] that ran there, and the CPU seconds per GB moved by client and
/// server together.
fn bars(report: &BenchReport) -> Vec<Bar> {
    let mut bars = Vec::new();
    for (unit, value) in [
        (
            "GB/s",
            (|r| r.gbps) as fn(&kvfabric_transport::bench::Row) -> f64,
        ),
        ("CPU s per GB (client + server)", |r| {
            r.cpu_client_s_per_gb + r.cpu_server_s_per_gb
        }),
    ] {
        for (phase, series) in SERIES {
            for r in report.rows.iter().filter(|r| r.phase == phase) {
                bars.push(Bar::new(r.path.clone(), series, value(r), unit));
            }
        }
    }
    bars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::testing::value_of;
    use kvfabric_transport::bench::Row;

    fn row(path: &str, phase: &str, gbps: f64) -> Row {
        Row {
            path: path.into(),
            phase: phase.into(),
            label: format!("({phase})"),
            gbps,
            cpu_client_s_per_gb: 0.5,
            cpu_server_s_per_gb: 0.25,
        }
    }

    #[test]
    fn the_chart_has_each_path_and_the_drawn_phases_only() {
        let report = BenchReport {
            rows: vec![
                row("loopback", "b", 3.4),
                row("loopback", "t", 1.6),
                row("loopback", "a", 1.9),
                row("loopback", "c", 2.4),
                row("veth mtu 1500", "b", 1.5),
                row("veth mtu 1500", "a", 1.1),
            ],
            veth: VethRows::Ran,
        };
        let bars = bars(&report);
        assert_eq!(
            bars.len(),
            10,
            "5 rows drawn, 2 panels; the unverified one left out"
        );
        assert_eq!(
            bars[0].series, "QUIC, verified",
            "QUIC first: the first colour"
        );
        assert_eq!(value_of(&bars, "loopback", "QUIC, verified", "GB/s"), 1.9);
        assert_eq!(
            value_of(&bars, "veth mtu 1500", "TCP copy (baseline)", "GB/s"),
            1.5
        );
        assert_eq!(
            value_of(
                &bars,
                "loopback",
                "TCP + rustls + blake3",
                "CPU s per GB (client + server)"
            ),
            0.75
        );
        assert!(!bars.iter().any(|b| b.series.contains("UCX")));
    }

    #[test]
    fn plot_is_taken_out_of_the_options_wherever_it_is() {
        let opts = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut o = opts(&["--blocks", "2", "--plot", "t.png", "--no-veth"]);
        assert_eq!(take_plot(&mut o).unwrap(), Some(PathBuf::from("t.png")));
        assert_eq!(o, opts(&["--blocks", "2", "--no-veth"]));
        let mut o = opts(&["--plot=u.png"]);
        assert_eq!(take_plot(&mut o).unwrap(), Some(PathBuf::from("u.png")));
        assert!(o.is_empty());
        let mut o = opts(&["--blocks", "2"]);
        assert_eq!(take_plot(&mut o).unwrap(), None);
        assert!(take_plot(&mut opts(&["--plot"]))
            .unwrap_err()
            .to_string()
            .contains("expected a file name"));
        assert!(take_plot(&mut opts(&["--plot", "a", "--plot=b"]))
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }
}
