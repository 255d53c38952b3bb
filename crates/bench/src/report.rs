//! The figures of one side of `kvfabric bench directory`, latency percentiles, the table, and
//! the chart's rows.

use std::time::Duration;

use crate::plot::Bar;

/// p50 and p99 of a set of latencies, in µs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Latency {
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
}

impl Latency {
    /// From raw samples (at least one).
    pub(super) fn of(mut samples: Vec<Duration>) -> Latency {
        assert!(!samples.is_empty(), "latency of no samples");
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i].as_secs_f64() * 1e6
        };
        Latency {
            p50_us: at(0.50),
            p99_us: at(0.99),
        }
    }
}

/// What one side measured.
#[derive(Debug, Clone)]
pub(super) struct Side {
    /// Registrations per second, one record per request, until all were committed.
    pub(super) reg_per_s: f64,
    /// Registrations per second, [`BATCH_RECORDS`] records per request (kvfabric: one batch
    /// claim; etcd: one `txn`).
    pub(super) batched_per_s: f64,
    pub(super) local: Latency,
    pub(super) linearizable: Latency,
    /// Bytes per directory entry per replica, by each measure.
    pub(super) mem: Vec<Memory>,
}

/// Bytes per directory entry per replica, by one measure.
#[derive(Debug, Clone)]
pub(super) struct Memory {
    /// The measure, the same on both sides ("RSS growth", "data dir growth").
    pub(super) what: &'static str,
    /// How it was measured on this side.
    pub(super) how: String,
    pub(super) bytes: f64,
}

/// Records per batched request on both sides (the directory's default `batch_records_max`).
pub(super) const BATCH_RECORDS: u64 = 512;

/// Both sides.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) kvf: Side,
    pub(super) etcd: Option<Side>,
}

impl Report {
    pub(super) fn print(&self) {
        let k = &self.kvf;
        let e = self.etcd.as_ref();
        let na = "n/a".to_string();
        let fmt_e = |f: &dyn Fn(&Side) -> f64| e.map_or(na.clone(), |e| format!("{:.1}", f(e)));
        let ratio =
            |f: &dyn Fn(&Side) -> f64| e.map_or(na.clone(), |e| format!("{:.3}", f(k) / f(e)));
        println!();
        println!(
            "{:<48} {:>14} {:>14} {:>10}",
            "metric", "kvfabric", "etcd (gRPC)", "ratio"
        );
        let batched = format!("registrations, {BATCH_RECORDS} per request (records/s)");
        type Row<'a> = (&'a str, &'a dyn Fn(&Side) -> f64);
        let rows: [Row; 6] = [
            ("registrations, 1 per request (records/s)", &|s| s.reg_per_s),
            (&batched, &|s| s.batched_per_s),
            ("lookup local p50 (us)", &|s| s.local.p50_us),
            ("lookup local p99 (us)", &|s| s.local.p99_us),
            ("lookup linearizable p50 (us)", &|s| s.linearizable.p50_us),
            ("lookup linearizable p99 (us)", &|s| s.linearizable.p99_us),
        ];
        for (name, f) in rows {
            println!(
                "{:<48} {:>14.1} {:>14} {:>10}",
                name,
                f(k),
                fmt_e(f),
                ratio(f)
            );
        }
        println!("(kvfabric batched: one POST /v1/operator/claims of {BATCH_RECORDS} records; etcd batched: one txn of {BATCH_RECORDS} puts)");
        for m in &k.mem {
            println!(
                "kvfabric memory per entry: {:.0} bytes ({})",
                m.bytes, m.how
            );
        }
        for m in e.map(|e| e.mem.as_slice()).unwrap_or(&[]) {
            println!("etcd memory per entry: {:.0} bytes ({})", m.bytes, m.how);
        }
        let Some(e) = e else {
            println!("targets: not checked (etcd skipped)");
            println!("ratio registrations_over_etcd_grpc n/a");
            println!("ratio batched_registrations_over_etcd_txn n/a");
            return;
        };
        let reg = k.reg_per_s / e.reg_per_s;
        let batch = k.batched_per_s / e.batched_per_s;
        let lin = k.linearizable.p99_us <= e.linearizable.p99_us;
        let met = |ok: bool| if ok { "met" } else { "not met" };
        println!(
            "targets: registrations >= 2x etcd: {} ({reg:.2}x); batched >= 2x etcd txn: {} ({batch:.2}x); linearizable p99 <= etcd: {}",
            met(reg >= 2.0),
            met(batch >= 2.0),
            met(lin)
        );
        println!("ratio registrations_over_etcd_grpc {reg:.2}");
        println!("ratio batched_registrations_over_etcd_txn {batch:.2}");
    }
}

impl Report {
    /// The chart of what [`Report::print`] prints: registrations per second, lookup p50 and
    /// p99 (ms), bytes per entry; kvfabric's figures first, etcd's second.
    pub(super) fn bars(&self) -> Vec<Bar> {
        let sides = [
            ("kvfabric", Some(&self.kvf)),
            ("etcd (gRPC)", self.etcd.as_ref()),
        ];
        let mut bars = Vec::new();
        for (series, side) in sides {
            let Some(s) = side else { continue };
            let batched = format!("{BATCH_RECORDS} per request (etcd: txn)");
            let reg = "registrations (records/s)";
            bars.push(Bar::new(
                "1 per request (etcd: put)",
                series,
                s.reg_per_s,
                reg,
            ));
            bars.push(Bar::new(batched, series, s.batched_per_s, reg));
            let (local, lin) = (&s.local, &s.linearizable);
            for (unit, local_us, lin_us) in [
                ("lookup p50 (ms)", local.p50_us, lin.p50_us),
                ("lookup p99 (ms)", local.p99_us, lin.p99_us),
            ] {
                let local_group = "local (etcd: serializable)";
                bars.push(Bar::new(local_group, series, local_us / 1e3, unit));
                bars.push(Bar::new("linearizable", series, lin_us / 1e3, unit));
            }
            for m in &s.mem {
                bars.push(Bar::new(
                    m.what,
                    series,
                    m.bytes,
                    "bytes per entry per replica",
                ));
            }
        }
        bars
    }
}

/// Resident set size of process `pid` in bytes (`VmRSS` of `/proc/PID/status`).
pub(super) fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Size of the file at `dir`, or total size of the files under it.
pub(super) fn dir_bytes(dir: &std::path::Path) -> u64 {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_file() => return m.len(),
        Ok(_) => {}
        Err(_) => return 0,
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Record `i`'s block id: deterministic, shared by both sides.
pub(super) fn block_of(i: u64) -> kvfabric_store::BlockId {
    kvfabric_store::BlockId(*blake3::hash(&i.to_le_bytes()).as_bytes())
}

/// Record `i`'s chunk key (what a lookup names it by), in hex: deterministic, shared by both
/// sides.
pub(super) fn key_of(i: u64) -> String {
    blake3::keyed_hash(b"kvfabric bench directory chunk!!", &i.to_le_bytes())
        .to_hex()
        .to_string()
}

/// A deterministic pseudo-random sequence (splitmix64) for picking lookup targets.
pub(super) fn pick(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::testing::value_of;

    fn side(reg: f64, p99_us: f64) -> Side {
        let lat = Latency {
            p50_us: p99_us / 2.0,
            p99_us,
        };
        Side {
            reg_per_s: reg,
            batched_per_s: reg * 10.0,
            local: lat,
            linearizable: Latency {
                p50_us: 3000.0,
                p99_us: 8000.0,
            },
            mem: vec![Memory {
                what: "RSS growth",
                how: "RSS".into(),
                bytes: 1440.0,
            }],
        }
    }

    #[test]
    fn the_chart_rows_are_the_printed_figures_in_their_units() {
        let r = Report {
            kvf: side(1907.0, 18_900.0),
            etcd: Some(side(2250.0, 193_800.0)),
        };
        let bars = r.bars();
        let find = |group: &str, series: &str, unit: &str| value_of(&bars, group, series, unit);
        let reg = "registrations (records/s)";
        assert_eq!(find("1 per request (etcd: put)", "kvfabric", reg), 1907.0);
        assert_eq!(
            find("512 per request (etcd: txn)", "etcd (gRPC)", reg),
            22500.0
        );
        let local = "local (etcd: serializable)";
        assert_eq!(find(local, "kvfabric", "lookup p99 (ms)"), 18.9);
        assert_eq!(find(local, "etcd (gRPC)", "lookup p99 (ms)"), 193.8);
        assert_eq!(find(local, "etcd (gRPC)", "lookup p50 (ms)"), 96.9);
        assert_eq!(find("linearizable", "kvfabric", "lookup p50 (ms)"), 3.0);
        assert_eq!(
            find("RSS growth", "etcd (gRPC)", "bytes per entry per replica"),
            1440.0
        );
        assert_eq!(bars.len(), 2 * 7);
        assert_eq!(
            bars[0].series, "kvfabric",
            "kvfabric first: the first colour"
        );
        // Without etcd, kvfabric's figures alone.
        let alone = Report {
            kvf: side(1.0, 1.0),
            etcd: None,
        };
        assert!(alone.bars().iter().all(|b| b.series == "kvfabric"));
        assert_eq!(alone.bars().len(), 7);
    }
}
