//! Store benchmarks: sealing against `blake3::hash`, the disk tier against plain file I/O.
//!
//! `cargo bench -p kvfabric-store --bench store_bench`, the same as `kvfabric bench store`:
//! both run [`kvfabric_store::bench::run`] (24 blocks, 7 rounds here), whose docs say what is
//! measured and which ratio lines are printed.

fn main() -> anyhow::Result<()> {
    kvfabric_store::bench::run(&kvfabric_store::bench::StoreBenchOptions::default()).map(|_| ())
}
