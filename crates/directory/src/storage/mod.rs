//! Persistence of one directory shard in an embedded redb database.
//!
//! redb because it is pure Rust (no C toolchain, unlike RocksDB), ACID with copy-on-write
//! B-trees and checksummed pages, and fsyncs on every commit by default — the log, the vote and
//! the snapshot each need exactly that. The saved committed id alone is written without an
//! fsync (it rides on the next log append's), since openraft only uses it as a hint.
//!
//! One database file per shard, with two tables:
//!
//! | table      | key              | value                                                  |
//! |------------|------------------|--------------------------------------------------------|
//! | `raft_log` | log index, u64   | record: version byte `1` ‖ bincode(`Entry`)            |
//! | `meta`     | `"shard"`        | record of the `ShardId` the file belongs to            |
//! |            | `"vote"`         | record of the last saved `Vote`                        |
//! |            | `"committed"`    | record of the last saved committed `LogId`             |
//! |            | `"last_purged"`  | record of the last purged `LogId`                      |
//! |            | `"snapshot"`     | record of `{ meta, data }`, data in [`snapshot`] format|
//!
//! The state machine lives in memory and is rebuilt on open from the snapshot; openraft then
//! re-applies the log from the snapshot up to the saved committed id, so a restarted member
//! resumes where it stopped and asks the leader only for what it missed. Every write is one
//! redb transaction, run on tokio's blocking pool so that an fsync never stalls a Raft core.

mod log_store;
mod records;
pub mod snapshot;
mod state_machine;

use std::path::Path;
use std::sync::Arc;

pub use log_store::LogStore;
pub use state_machine::{ShardView, StateMachineStore};

use crate::error::DirectoryError;
use crate::ids::ShardId;

/// Opens (or creates) the store of `shard` at `path`: the Raft log and the state machine.
///
/// Fails with [`DirectoryError::ShardMismatch`] when the file belongs to another shard, and
/// with [`DirectoryError::Storage`] when it is held open by another member (redb locks it).
pub async fn open_store(
    path: &Path,
    shard: ShardId,
) -> Result<(LogStore, StateMachineStore), DirectoryError> {
    let path = path.to_path_buf();
    let db = tokio::task::spawn_blocking(move || records::open_db(&path, shard))
        .await
        .map_err(|e| DirectoryError::storage("open", e))??;
    let db = Arc::new(db);
    let sm = StateMachineStore::load(db.clone(), shard).await?;
    Ok((LogStore::new(db), sm))
}
