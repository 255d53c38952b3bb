//! What a run measured ([`BenchReport`]: a row per path and phase, returned by
//! [`super::run`] for callers that plot it) and how it is printed: a table per path, then the
//! ratio lines in a fixed order (the module docs of [`super`] list it).

use super::phases::Tally;

/// The loopback path's label.
pub const LOOPBACK: &str = "loopback";

/// The label of the veth path at `mtu`.
pub fn veth_path(mtu: u32) -> String {
    format!("veth mtu {mtu}")
}

/// One measured phase on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The path: [`LOOPBACK`] or [`veth_path`]'s label.
    pub path: String,
    /// The phase's code: `b` TCP, `t` TLS-TCP verified, `a` QUIC verified, `c` QUIC
    /// unverified, `s` stock quinn, and the UCX ones (`d`, `du`, `gt`, `g`, `gu`).
    pub phase: String,
    /// The phase as the table names it.
    pub label: String,
    /// Payload bytes over wall time, GB/s.
    pub gbps: f64,
    /// CPU seconds per GB moved of the client process.
    pub cpu_client_s_per_gb: f64,
    /// CPU seconds per GB moved of the server process.
    pub cpu_server_s_per_gb: f64,
}

impl Row {
    /// A row from a phase's tally.
    pub(crate) fn of(path: &str, phase: &str, label: &str, t: &Tally) -> Row {
        let (cc, cs) = t.cpu_per_gb();
        Row {
            path: path.into(),
            phase: phase.into(),
            label: label.into(),
            gbps: t.gbps(),
            cpu_client_s_per_gb: cc,
            cpu_server_s_per_gb: cs,
        }
    }

    /// The line a veth client process prints for its parent: `row CODE GBPS CC CS LABEL`.
    pub(crate) fn wire(&self) -> String {
        format!(
            "row {} {} {} {} {}",
            self.phase, self.gbps, self.cpu_client_s_per_gb, self.cpu_server_s_per_gb, self.label
        )
    }

    /// Parses [`Row::wire`]'s line (without its `row ` prefix) as a row of `path`.
    pub(crate) fn from_wire(path: &str, rest: &str) -> anyhow::Result<Row> {
        let mut f = rest.splitn(5, ' ');
        let mut next = |what: &str| {
            f.next()
                .ok_or_else(|| anyhow::anyhow!("row line {rest:?}: no {what}"))
        };
        let phase = next("phase")?.to_string();
        let mut number = |what: &str| -> anyhow::Result<f64> {
            let v = next(what)?;
            v.parse()
                .map_err(|e| anyhow::anyhow!("row line {rest:?}: {what} {v:?}: {e}"))
        };
        let (gbps, cc, cs) = (
            number("GB/s")?,
            number("client CPU")?,
            number("server CPU")?,
        );
        Ok(Row {
            path: path.into(),
            phase,
            label: next("label")?.to_string(),
            gbps,
            cpu_client_s_per_gb: cc,
            cpu_server_s_per_gb: cs,
        })
    }
}

/// Whether the veth rows ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum VethRows {
    /// Measured at both MTUs.
    Ran,
    /// Not measured, and why (`--no-veth`, not root, `ip netns` failing).
    Skipped(String),
    /// The process was a server or a veth client: it has no summary of its own.
    #[default]
    NotApplicable,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BenchReport {
    /// Every phase on every path, in the order measured.
    pub rows: Vec<Row>,
    /// Whether the veth rows are among them.
    pub veth: VethRows,
}

impl BenchReport {
    /// The GB/s of `phase` on `path`, if measured.
    pub fn gbps(&self, path: &str, phase: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.path == path && r.phase == phase)
            .map(|r| r.gbps)
    }

    /// `num` over `den` on `path`, if both were measured.
    pub fn ratio(&self, path: &str, num: &str, den: &str) -> Option<f64> {
        Some(self.gbps(path, num)? / self.gbps(path, den)?)
    }

    /// The closing lines, in their documented order: the veth skip line when skipped; with
    /// UCX rows their three ratios; the loopback QUIC-over-TLS-TCP ratio; the 9000-byte veth
    /// ratios, then the 1500-byte ones; last, always, `ratio quic_over_tcp` (loopback). A
    /// ratio whose rows did not run reads `n/a`.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let VethRows::Skipped(why) = &self.veth {
            lines.push(format!("veth rows: skipped ({why})"));
        }
        let line = |name: &str, path: &str, num: &str, den: &str| match self.ratio(path, num, den) {
            Some(v) => format!("ratio {name} {v:.3}"),
            None => format!("ratio {name} n/a"),
        };
        if self.gbps(LOOPBACK, "d").is_some() {
            lines.push(line("ucx_over_tcp", LOOPBACK, "d", "b"));
            lines.push(line("ucx_get_tcp_over_tcp", LOOPBACK, "gt", "b"));
            lines.push(line("ucx_get_over_tcp", LOOPBACK, "g", "b"));
        }
        lines.push(line("quic_over_tls_tcp", LOOPBACK, "a", "t"));
        let (jumbo, plain) = (veth_path(9000), veth_path(1500));
        lines.push(line("quic_veth9000_over_tcp", &jumbo, "a", "b"));
        lines.push(line("quic_veth9000_over_tls_tcp", &jumbo, "a", "t"));
        lines.push(line("quic_veth_over_tcp", &plain, "a", "b"));
        lines.push(line("quic_veth_over_tls_tcp", &plain, "a", "t"));
        lines.push(line("quic_over_tcp", LOOPBACK, "a", "b"));
        lines
    }
}

/// The table of one path's rows: GB/s, the ratio to its own plain TCP row, CPU s/GB.
pub(crate) fn table(rows: &[Row]) -> Vec<String> {
    let Some(path) = rows.first().map(|r| r.path.as_str()) else {
        return Vec::new();
    };
    let tcp = rows.iter().find(|r| r.phase == "b").map(|r| r.gbps);
    let mut out = vec![format!(
        "{:<40} {:>6} {:>7} {:>22}",
        format!("phase ({path})"),
        "GB/s",
        "x (b)",
        "CPU s/GB client+server"
    )];
    for r in rows {
        let x = tcp.map_or(f64::NAN, |b| r.gbps / b);
        out.push(format!(
            "{:<40} {:>6.2} {:>7.2} {:>10.2} = {:.2} + {:.2}",
            r.label,
            r.gbps,
            x,
            r.cpu_client_s_per_gb + r.cpu_server_s_per_gb,
            r.cpu_client_s_per_gb,
            r.cpu_server_s_per_gb
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(path: &str, phase: &str, gbps: f64) -> Row {
        Row {
            path: path.into(),
            phase: phase.into(),
            label: format!("({phase}) a phase"),
            gbps,
            cpu_client_s_per_gb: 0.25,
            cpu_server_s_per_gb: 0.5,
        }
    }

    #[test]
    fn ratio_lines_come_in_order_with_quic_over_tcp_last() {
        let mut r = BenchReport {
            veth: VethRows::Ran,
            ..BenchReport::default()
        };
        for path in [LOOPBACK.to_string(), veth_path(1500), veth_path(9000)] {
            r.rows.push(row(&path, "b", 4.0));
            r.rows.push(row(&path, "t", 1.0));
            r.rows.push(row(&path, "a", 2.0));
        }
        assert_eq!(
            r.summary_lines(),
            [
                "ratio quic_over_tls_tcp 2.000",
                "ratio quic_veth9000_over_tcp 0.500",
                "ratio quic_veth9000_over_tls_tcp 2.000",
                "ratio quic_veth_over_tcp 0.500",
                "ratio quic_veth_over_tls_tcp 2.000",
                "ratio quic_over_tcp 0.500",
            ]
        );
        r.rows.push(row(LOOPBACK, "d", 1.0));
        r.rows.push(row(LOOPBACK, "gt", 2.0));
        r.rows.push(row(LOOPBACK, "g", 3.0));
        let lines = r.summary_lines();
        assert_eq!(
            lines[..3],
            [
                "ratio ucx_over_tcp 0.250",
                "ratio ucx_get_tcp_over_tcp 0.500",
                "ratio ucx_get_over_tcp 0.750"
            ]
        );
        assert_eq!(lines.last().unwrap(), "ratio quic_over_tcp 0.500");
    }

    #[test]
    fn skipped_veth_rows_say_why_and_their_ratios_read_n_a() {
        let r = BenchReport {
            rows: vec![row(LOOPBACK, "b", 4.0), row(LOOPBACK, "a", 2.0)],
            veth: VethRows::Skipped("not root".into()),
        };
        let lines = r.summary_lines();
        assert_eq!(lines[0], "veth rows: skipped (not root)");
        assert!(lines.contains(&"ratio quic_veth_over_tcp n/a".to_string()));
        assert!(lines.contains(&"ratio quic_veth_over_tls_tcp n/a".to_string()));
        assert!(lines.contains(&"ratio quic_over_tls_tcp n/a".to_string()));
        assert_eq!(lines.last().unwrap(), "ratio quic_over_tcp 0.500");
    }

    #[test]
    fn a_row_survives_the_wire_between_processes() {
        let r = row("veth mtu 1500", "a", 1.234_567);
        let line = r.wire();
        let back = Row::from_wire("veth mtu 1500", line.strip_prefix("row ").unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(Row::from_wire("x", "a 1.0 zero").is_err());
    }

    #[test]
    fn the_table_shows_each_row_against_its_paths_tcp() {
        let t = table(&[row(LOOPBACK, "b", 4.0), row(LOOPBACK, "a", 2.0)]);
        assert!(t[0].starts_with("phase (loopback)"), "{t:?}");
        assert!(
            t[2].starts_with("(a) a phase") && t[2].contains("  0.50 "),
            "{t:?}"
        );
        assert!(t[2].ends_with("0.75 = 0.25 + 0.50"), "{t:?}");
    }
}
