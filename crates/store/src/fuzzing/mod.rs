//! Property checks for the store's decoders, one `run` per fuzz target (`fuzzing` feature).
//!
//! Each `run` takes arbitrary bytes and panics when a property fails, never on bad input
//! alone. The cargo-fuzz targets in `crates/store/fuzz` call them; `tests/fuzz_corpus.rs`
//! replays the committed corpora (and every crash found) through them on stable Rust.
//!
//! - [`block_header`]: the 64-byte block header.
//! - [`crate::tier::disk::fuzzing::entry`]: the disk entry header.
//! - [`crate::tier::disk::fuzzing::recover`]: a disk tier's recovery from its segment files.

pub mod block_header;
mod input;

pub use crate::tier::disk::fuzzing::{entry as disk_entry, recover as disk_recover};
pub use input::Input;

/// A fresh directory for a case, in memory where the system has a tmpfs (no disk I/O per
/// case); removed when dropped.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("kvfabric-fuzz-");
    let dir = if shm.is_dir() {
        builder.tempdir_in(shm)
    } else {
        builder.tempdir()
    };
    dir.expect("a scratch directory")
}
