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
