//! Property checks for the directory's decoders, one `run` per fuzz target (`fuzzing`
//! feature).
//!
//! Each `run` takes arbitrary bytes and panics when a property fails, never on bad input
//! alone. The cargo-fuzz targets in `crates/directory/fuzz` call them; `tests/fuzz_corpus.rs`
//! replays the committed corpora (and every crash found) through them on stable Rust.
//!
//! - [`rpc_frame`]: the RPC frame codec ([`crate::codec`]) and the messages in it
//!   ([`crate::rpc`]), as the Raft network ([`crate::network`]) and the RPC server decode them.
//! - [`snapshot`]: the snapshot format ([`crate::storage::snapshot`]).
//! - [`wal_record`]: one record of the Raft log's WAL.
//! - [`wal_replay`]: opening a WAL: scanning, replay, the torn-tail cut.

pub mod rpc_frame;
pub mod snapshot;

pub use crate::storage::wal_fuzzing::{record as wal_record, replay as wal_replay};
