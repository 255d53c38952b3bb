//! Persistence of one directory shard: the Raft log and vote in a write-ahead log of its own
//! (`wal`), the snapshot and the shard's identity in an embedded redb database.
//!
//! The log is written on every Raft round, by every member, and openraft 0.9 waits for the
//! leader's flush before it replicates (the leader's entries reach the voters beside that
//! flush through [`crate::preappend`]): it gets a plain append-only file, one `fdatasync` per
//! group of writes (~0.25 ms here, against ~0.5 ms for a redb commit). redb keeps what is
//! written rarely and read whole: pure Rust (no C toolchain, unlike RocksDB), ACID with
//! copy-on-write B-trees and checksummed pages, an fsync on every commit.
//!
//! | where                | what                                                            |
//! |----------------------|-----------------------------------------------------------------|
//! | `<path>.wal/*.seg`   | entries, votes, committed ids, truncations, purges (`wal`)       |
//! | `<path>` `meta` table| `"shard"`: the `ShardId` the files belong to                    |
//! |                      | `"snapshot"`: `{ meta, data }`, data in [`snapshot`] format       |
//!
//! redb holds the file lock: a second member opening the same `path` is refused before it
//! touches the WAL. A store written by an earlier version (the log in redb's `raft_log` table)
//! has it moved into the WAL on open (`wal::import_redb_log`).
//!
//! The state machine lives in memory and is rebuilt on open from the snapshot; openraft then
//! re-applies the log from the snapshot up to the saved committed id, so a restarted member
//! resumes where it stopped and asks the leader only for what it missed. Log and vote writes go
//! through one writer thread per member (`log_writer`) that folds whatever is queued into one
//! write (group commit); appends return once staged in the in-memory tail (`log_tail`), so
//! readers see them at once. Snapshot writes run on tokio's blocking pool and never wait for
//! the log, nor it for them.

mod log_store;
mod log_tail;
mod log_writer;
mod records;
pub mod snapshot;
mod snapshot_trigger;
mod state_machine;
mod wal;

#[cfg(feature = "fuzzing")]
pub use wal::fuzzing as wal_fuzzing;

use std::path::Path;
use std::sync::Arc;

pub use log_store::LogStore;
pub use snapshot_trigger::SnapshotTrigger;
pub use state_machine::{ShardView, StateDigest, StateMachineStore};

use crate::error::DirectoryError;
use crate::ids::ShardId;

/// Opens (or creates) the store of `shard` at `path` (the redb file; the WAL goes in
/// `<path>.wal`): the Raft log and the state machine.
///
/// Fails with [`DirectoryError::ShardMismatch`] when the file belongs to another shard, with
/// [`DirectoryError::Storage`] when it is held open by another member (redb locks it), and
/// with [`DirectoryError::Corrupt`] when the WAL holds a damaged record anywhere but in a
/// torn write at its very end.
/// `trigger` counts applied records towards the next snapshot (see [`SnapshotTrigger`]).
pub async fn open_store(
    path: &Path,
    shard: ShardId,
    trigger: Arc<SnapshotTrigger>,
) -> Result<(LogStore, StateMachineStore), DirectoryError> {
    let path = path.to_path_buf();
    let (db, wal, reader) = tokio::task::spawn_blocking(move || {
        let db = records::open_db(&path, shard)?;
        let dir = wal::dir_of(&path);
        wal::import_redb_log(&db, &dir)?;
        let (wal, reader) = wal::Wal::open(&dir)?;
        Ok::<_, DirectoryError>((db, wal, reader))
    })
    .await
    .map_err(|e| DirectoryError::storage("open", e))??;
    let db = Arc::new(db);
    let sm = StateMachineStore::load(db, shard, trigger).await?;
    let log = LogStore::new(wal, reader).map_err(|e| DirectoryError::storage("open", e))?;
    Ok((log, sm))
}
