//! A timeline of every node's Raft and transport counters through a run, for post-mortems.
//!
//! A stall shows in the history as operations that take seconds; why it happened (no leader,
//! a leader that proposes nothing, entries that commit slowly, RPCs dropped unanswered, a
//! link that redials) shows in the counters each node exports on `/metrics`. A thread reads
//! every node's `kvfabric_raft_state` and `kvfabric_transport` gauges every
//! [`PERIOD`] and appends one JSON line per node to `timeline.jsonl` in the run directory,
//! stamped on the history's clock (`t_ms`, as `invoke_ms`): `{"t_ms", "node", "stats"}`, or
//! `"down": true` when the node did not answer. The file is kept with the history (a failed
//! run, or `--keep`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::client::Client;
use crate::history::Recorder;

/// How often each node is read.
pub const PERIOD: Duration = Duration::from_millis(250);

/// The metric families recorded.
const FAMILIES: [&str; 2] = ["kvfabric_raft_state", "kvfabric_transport"];

/// One node's counters at one moment.
#[derive(Debug, Serialize)]
struct Sample<'a> {
    t_ms: f64,
    node: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    down: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    stats: &'a BTreeMap<String, f64>,
}

/// The recording thread; [`Timeline::stop`] ends it.
pub struct Timeline {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Timeline {
    /// Starts reading `apis` (node `i + 1` at `apis[i]`) into `dir/timeline.jsonl`.
    pub fn start(apis: Vec<String>, rec: Recorder, dir: &Path) -> std::io::Result<Timeline> {
        let file = std::fs::File::create(dir.join("timeline.jsonl"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let client = Client::new(PERIOD);
            let mut out = std::io::BufWriter::new(file);
            while !stopping.load(Ordering::Relaxed) {
                let round = std::time::Instant::now();
                for (i, api) in apis.iter().enumerate() {
                    let stats = client.metrics(api).map(|text| parse(&text));
                    let none = BTreeMap::new();
                    let sample = Sample {
                        t_ms: rec.now_ms(),
                        node: i as u64 + 1,
                        down: stats.is_none(),
                        stats: stats.as_ref().unwrap_or(&none),
                    };
                    if serde_json::to_writer(&mut out, &sample).is_err()
                        || out.write_all(b"\n").is_err()
                    {
                        return;
                    }
                }
                std::thread::sleep(PERIOD.saturating_sub(round.elapsed()));
            }
            let _ = out.flush();
        });
        Ok(Timeline {
            stop,
            thread: Some(thread),
        })
    }

    /// Ends the recording and flushes the file.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The gauges of [`FAMILIES`] in a Prometheus text exposition, keyed by the name and the
/// value of its `stat` label (`kvfabric_raft_state` `stat="term"` → `raft_state.term`).
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(family) = FAMILIES.iter().find(|f| line.starts_with(*f)) else {
            continue;
        };
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let stat = series
            .split_once("stat=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(s, _)| s);
        let short = family.trim_start_matches("kvfabric_");
        let key = match stat {
            Some(s) => format!("{short}.{s}"),
            None => series.trim_start_matches("kvfabric_").to_owned(),
        };
        out.insert(key, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_families_are_read_by_stat() {
        let text = "# HELP kvfabric_raft_state Raft\n\
                    # TYPE kvfabric_raft_state gauge\n\
                    kvfabric_raft_state{stat=\"term\"} 7\n\
                    kvfabric_raft_state{stat=\"rpc_abandoned\"} 12\n\
                    kvfabric_transport{stat=\"redials\"} 3\n\
                    kvfabric_store_blocks{tier=\"host\"} 99\n\
                    kvfabric_raft_state{stat=\"broken\"} x\n";
        let got = parse(text);
        let want: BTreeMap<String, f64> = [
            ("raft_state.term", 7.0),
            ("raft_state.rpc_abandoned", 12.0),
            ("transport.redials", 3.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(got, want);
    }
}
