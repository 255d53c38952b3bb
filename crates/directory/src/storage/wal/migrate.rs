//! Moving a log kept by an earlier version (the redb `raft_log` table, with the vote,
//! committed id and purge point in `meta`) into the WAL, once, without losing any of it.
//!
//! The WAL is built beside its final place, synced and renamed into it; only then are the
//! redb copies removed. A crash before the rename leaves the redb log in charge (the next open
//! starts over); after it, the WAL is in charge and the next open removes the redb leftovers.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::frame::Record;
use super::{segment, Checkpoint};
use crate::error::DirectoryError;
use crate::storage::records::{
    decode, read_meta, KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE, LOG, META,
};
use crate::type_config::{Entry, LogId};

fn storage(e: impl std::fmt::Display) -> DirectoryError {
    DirectoryError::storage("move the raft log out of redb", e)
}

/// Whether redb still holds a log or any of its meta records.
fn redb_has_log(db: &Database) -> Result<bool, DirectoryError> {
    let txn = db.begin_read().map_err(storage)?;
    let log = txn.open_table(LOG).map_err(storage)?;
    let meta = txn.open_table(META).map_err(storage)?;
    let mut any = log.len().map_err(storage)? > 0;
    for key in [KEY_VOTE, KEY_COMMITTED, KEY_LAST_PURGED] {
        any |= meta.get(key).map_err(storage)?.is_some();
    }
    Ok(any)
}

/// Removes the log and its meta records from redb, in one transaction.
fn clear_redb_log(db: &Database) -> Result<(), DirectoryError> {
    let txn = db.begin_write().map_err(storage)?;
    {
        let mut log = txn.open_table(LOG).map_err(storage)?;
        log.retain(|_, _| false).map_err(storage)?;
        let mut meta = txn.open_table(META).map_err(storage)?;
        for key in [KEY_VOTE, KEY_COMMITTED, KEY_LAST_PURGED] {
            meta.remove(key).map_err(storage)?;
        }
    }
    txn.commit().map_err(storage)
}

/// Moves redb's log into a new WAL at `dir`, if redb holds one; removes redb's copy once the
/// WAL holds it (also when an earlier move was cut short after its rename).
pub(in crate::storage) fn import_redb_log(db: &Database, dir: &Path) -> Result<(), DirectoryError> {
    if !redb_has_log(db)? {
        return Ok(());
    }
    let wal_exists = dir.exists() && !segment::list(dir).map_err(storage)?.is_empty();
    if !wal_exists {
        write_wal_from_redb(db, dir)?;
        tracing::info!(wal = %dir.display(), "raft log moved from redb into the WAL");
    }
    clear_redb_log(db)
}

fn write_wal_from_redb(db: &Database, dir: &Path) -> Result<(), DirectoryError> {
    let corrupt = |reason: String| DirectoryError::Corrupt {
        what: "redb raft log",
        reason,
    };
    let checkpoint = Checkpoint {
        vote: read_meta(db, KEY_VOTE).map_err(corrupt)?,
        committed: read_meta::<Option<LogId>>(db, KEY_COMMITTED)
            .map_err(corrupt)?
            .flatten(),
        last_purged: read_meta(db, KEY_LAST_PURGED).map_err(corrupt)?,
    };
    let mut buf = Vec::new();
    Record::Checkpoint(checkpoint)
        .write_to(&mut buf)
        .map_err(corrupt)?;
    {
        let txn = db.begin_read().map_err(storage)?;
        let log = txn.open_table(LOG).map_err(storage)?;
        for item in log.iter().map_err(storage)? {
            let (_, v) = item.map_err(storage)?;
            let entry: Entry = decode(v.value()).map_err(corrupt)?;
            Record::Entry(Box::new(entry))
                .write_to(&mut buf)
                .map_err(corrupt)?;
        }
    }
    let tmp = tmp_dir_of(dir);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(storage)?;
    }
    std::fs::create_dir_all(&tmp).map_err(storage)?;
    segment::create(&tmp, 1, &buf).map_err(storage)?;
    if dir.exists() {
        // An empty WAL directory (no segment): nothing in it to keep.
        std::fs::remove_dir_all(dir).map_err(storage)?;
    }
    std::fs::rename(&tmp, dir).map_err(storage)?;
    if let Some(parent) = dir.parent() {
        segment::sync_dir(parent).map_err(storage)?;
    }
    Ok(())
}

fn tmp_dir_of(dir: &Path) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(".importing");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::storage::RaftLogStorage;
    use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader, Vote};

    use super::*;
    use crate::ids::{NodeId, ShardId};
    use crate::storage::records::{encode, open_db, write_meta};
    use crate::storage::{open_store, SnapshotTrigger};

    fn log_id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(2, NodeId(3)), index)
    }

    /// A store as the redb-only version left it: entries 4..=9 (1..=3 purged), a vote and a
    /// committed id in `meta`.
    fn old_store(path: &Path) {
        let db = open_db(path, ShardId(0)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            for i in 4..=9 {
                let e = Entry {
                    log_id: log_id(i),
                    payload: EntryPayload::Blank,
                };
                log.insert(i, encode(&e).unwrap().as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        write_meta(&db, KEY_VOTE, &Vote::new(2, NodeId(3))).unwrap();
        write_meta(&db, KEY_COMMITTED, &Some(log_id(8))).unwrap();
        write_meta(&db, KEY_LAST_PURGED, &log_id(3)).unwrap();
    }

    #[tokio::test]
    async fn a_log_kept_in_redb_moves_into_the_wal_whole_and_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("member.redb");
        old_store(&path);
        for round in 0..2 {
            let (mut log, _sm) =
                open_store(&path, ShardId(0), Arc::new(SnapshotTrigger::new(100_000)))
                    .await
                    .unwrap();
            let state = log.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(log_id(3)), "round {round}");
            assert_eq!(state.last_log_id, Some(log_id(9)), "round {round}");
            assert_eq!(
                log.read_vote().await.unwrap(),
                Some(Vote::new(2, NodeId(3)))
            );
            assert_eq!(log.read_committed().await.unwrap(), Some(log_id(8)));
            let ids: Vec<LogId> = log
                .try_get_log_entries(0..100)
                .await
                .unwrap()
                .iter()
                .map(|e| e.log_id)
                .collect();
            assert_eq!(
                ids,
                (4..=9).map(log_id).collect::<Vec<_>>(),
                "round {round}"
            );
        }
        let db = Database::open(&path).unwrap();
        assert!(!redb_has_log(&db).unwrap(), "redb's copy is gone");
    }

    #[test]
    fn a_move_cut_short_after_its_rename_finishes_on_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("member.redb");
        old_store(&path);
        let wal = crate::storage::wal::dir_of(&path);
        {
            let db = Database::open(&path).unwrap();
            // The WAL written and renamed, redb not yet cleared.
            write_wal_from_redb(&db, &wal).unwrap();
            assert!(redb_has_log(&db).unwrap());
            import_redb_log(&db, &wal).unwrap();
            assert!(!redb_has_log(&db).unwrap());
        }
        let (_w, reader) = crate::storage::wal::Wal::open(&wal).unwrap();
        assert_eq!(reader.last_log_id(), Some(log_id(9)));
        assert_eq!(reader.state().committed, Some(log_id(8)));
    }
}
