//! Persistence of one directory shard in an embedded redb database.
//!
//! redb because it is pure Rust (no C toolchain, unlike RocksDB), ACID with copy-on-write
//! B-trees and checksummed pages, and fsyncs on every commit by default — the log, the vote and
//! the snapshot each need exactly that. The saved committed id never costs an fsync of its own
//! (it rides in the next log append's transaction), since openraft only uses it as a hint.
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
//! resumes where it stopped and asks the leader only for what it missed. Log and vote writes go
//! through one writer thread per member (`log_writer`) that folds whatever is queued into one
//! transaction (group commit); appends return once staged in the in-memory tail
//! (`log_tail`), so an fsync never stalls a Raft core and replication starts before the
//! leader's own flush. Other writes (snapshots) run on tokio's blocking pool.

mod log_store;
mod log_tail;
mod log_writer;
mod records;
pub mod snapshot;
mod snapshot_trigger;
mod state_machine;

use std::path::Path;
use std::sync::Arc;

pub use log_store::LogStore;
pub use snapshot_trigger::SnapshotTrigger;
pub use state_machine::{ShardView, StateMachineStore};

use crate::error::DirectoryError;
use crate::ids::ShardId;

/// Opens (or creates) the store of `shard` at `path`: the Raft log and the state machine.
///
/// Fails with [`DirectoryError::ShardMismatch`] when the file belongs to another shard, and
/// with [`DirectoryError::Storage`] when it is held open by another member (redb locks it).
/// `trigger` counts applied records towards the next snapshot (see [`SnapshotTrigger`]).
pub async fn open_store(
    path: &Path,
    shard: ShardId,
    trigger: Arc<SnapshotTrigger>,
) -> Result<(LogStore, StateMachineStore), DirectoryError> {
    let path = path.to_path_buf();
    let db = tokio::task::spawn_blocking(move || records::open_db(&path, shard))
        .await
        .map_err(|e| DirectoryError::storage("open", e))??;
    let db = Arc::new(db);
    let sm = StateMachineStore::load(db.clone(), shard, trigger).await?;
    let log = LogStore::new(db).map_err(|e| DirectoryError::storage("open", e))?;
    Ok((log, sm))
}
