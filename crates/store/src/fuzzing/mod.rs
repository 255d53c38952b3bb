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

use std::path::{Path, PathBuf};

/// Every committed input of `target` under `fuzz_dir` (a fuzz crate's directory): the corpus
/// in `corpus/<target>` and the crashes in `regressions/<target>`, sorted by path.
pub fn inputs(fuzz_dir: &Path, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(items) = std::fs::read_dir(fuzz_dir.join(kind).join(target)) else {
            continue;
        };
        for item in items {
            let path = item.expect("list a corpus").path();
            let bytes = std::fs::read(&path).expect("read a corpus file");
            out.push((path, bytes));
        }
    }
    out.sort();
    out
}

/// Runs every committed input of `target` through `run` (the stable replay of a fuzz
/// target); panics naming the first input that fails, or when there is none at all.
pub fn replay(fuzz_dir: &Path, target: &str, run: fn(&[u8])) {
    let all = inputs(fuzz_dir, target);
    assert!(!all.is_empty(), "no corpus for {target} under {fuzz_dir:?}");
    for (path, bytes) in all {
        let outcome = std::panic::catch_unwind(|| run(&bytes));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
    }
}

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
