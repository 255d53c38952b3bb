//! `kvfabric bench store`: the store crate's benchmark (`kvfabric_store::bench`, the same code
//! as `cargo bench -p kvfabric-store --bench store_bench`): sealing 64-token DeepSeek-V3 blocks
//! against plain `blake3::hash`, the disk tier against plain file I/O, with its ratio lines.

use clap::Args;
use kvfabric_store::bench::{run as run_store_bench, StoreBenchOptions};

/// Arguments of `kvfabric bench store`.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// Distinct blocks sealed and written per round [default: 24].
    #[arg(long)]
    blocks: Option<usize>,
    /// Rounds of each side; each figure is the median round [default: 7].
    #[arg(long)]
    rounds: Option<usize>,
}

/// Runs `kvfabric bench store`.
pub(crate) fn run(a: StoreArgs) -> anyhow::Result<()> {
    let defaults = StoreBenchOptions::default();
    run_store_bench(&StoreBenchOptions {
        blocks: a.blocks.unwrap_or(defaults.blocks),
        rounds: a.rounds.unwrap_or(defaults.rounds),
    })
}
