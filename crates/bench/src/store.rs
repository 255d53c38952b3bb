//! `kvfabric bench store`: the store crate's benchmark (`kvfabric_store::bench`, the same code
//! as `cargo bench -p kvfabric-store --bench store_bench`): sealing 64-token DeepSeek-V3 blocks
//! against plain `blake3::hash`, the disk tier against plain file I/O, with its ratio lines;
//! `--plot FILE` draws the figures it printed ([`bars`]).

use clap::Args;
use kvfabric_store::bench::{run as run_store_bench, StoreBenchFigures, StoreBenchOptions};

use crate::plot::{Bar, PlotArg};

/// Arguments of `kvfabric bench store`.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// Distinct blocks sealed and written per round [default: 24].
    #[arg(long)]
    blocks: Option<usize>,
    /// Rounds of each side; each figure is the median round [default: 7].
    #[arg(long)]
    rounds: Option<usize>,
    #[command(flatten)]
    plot: PlotArg,
}

/// Runs `kvfabric bench store`.
pub(crate) fn run(a: StoreArgs) -> anyhow::Result<()> {
    a.plot.check()?;
    let defaults = StoreBenchOptions::default();
    let opts = StoreBenchOptions {
        blocks: a.blocks.unwrap_or(defaults.blocks),
        rounds: a.rounds.unwrap_or(defaults.rounds),
    };
    let figures = run_store_bench(&opts)?;
    let title = format!(
        "kvfabric bench store: {} DeepSeek-V3 blocks of 4.5 MB, median of {} rounds",
        opts.blocks, opts.rounds
    );
    a.plot.write_bars(&title, &bars(&figures))
}

/// The series: the store's figures first (the first colour), each baseline second.
const STORE: &str = "kvfabric store";
const BASELINE: &str = "baseline (blake3 / file I/O)";

/// The chart of the printed figures: one panel of GB/s, each of the store's paths beside
/// its baseline (`blake3::hash` for both seals, plain file I/O for the disk tier).
fn bars(f: &StoreBenchFigures) -> Vec<Bar> {
    let gbps = "GB/s";
    let mut bars = Vec::new();
    for (group, store, baseline) in [
        (
            "seal in place vs blake3",
            f.seal_in_place_gbps,
            f.blake3_gbps,
        ),
        (
            "seal from buffer vs blake3",
            f.seal_from_buffer_gbps,
            f.blake3_gbps,
        ),
        (
            "disk tier vs file (write + verified read)",
            f.disk_gbps,
            f.file_gbps,
        ),
    ] {
        bars.push(Bar::new(group, STORE, store, gbps));
        bars.push(Bar::new(group, BASELINE, baseline, gbps));
    }
    bars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::testing::value_of;

    #[test]
    fn the_chart_rows_pair_each_path_with_its_baseline() {
        let bars = bars(&StoreBenchFigures {
            seal_in_place_gbps: 1.9,
            seal_from_buffer_gbps: 1.1,
            blake3_gbps: 2.0,
            disk_gbps: 0.9,
            file_gbps: 1.0,
        });
        let find = |group: &str, series: &str| value_of(&bars, group, series, "GB/s");
        assert_eq!(find("seal in place vs blake3", STORE), 1.9);
        assert_eq!(find("seal in place vs blake3", BASELINE), 2.0);
        assert_eq!(find("seal from buffer vs blake3", STORE), 1.1);
        assert_eq!(find("seal from buffer vs blake3", BASELINE), 2.0);
        let disk = "disk tier vs file (write + verified read)";
        assert_eq!(find(disk, STORE), 0.9);
        assert_eq!(find(disk, BASELINE), 1.0);
        assert_eq!(bars.len(), 6);
        assert_eq!(bars[0].series, STORE, "the store first: the first colour");
    }
}
