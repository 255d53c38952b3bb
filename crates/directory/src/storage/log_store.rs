//! The Raft log and vote in redb: openraft's `RaftLogStorage`.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, Vote};
use redb::{Database, ReadableDatabase, ReadableTable};

use super::records::{
    blocking, decode, encode, io_read, io_write, read_meta, write_meta, write_meta_lazy,
    KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE, LOG, META,
};
use crate::ids::NodeId;
use crate::type_config::{Entry, LogId, StorageError, TypeConfig};

/// The log store of one member. Cheap to clone: clones share the database, which serializes
/// writers and lets readers (replication tasks) run beside them.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    pub(super) fn new(db: Arc<Database>) -> LogStore {
        LogStore { db }
    }

    /// Every entry in `range` that is still in the log (for tests and tools that audit it).
    pub async fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, StorageError> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        read_range(&self.db, bounds).await
    }
}

async fn read_range(
    db: &Arc<Database>,
    bounds: (Bound<u64>, Bound<u64>),
) -> Result<Vec<Entry>, StorageError> {
    blocking(db, move |db| {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        let log = txn.open_table(LOG).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for item in log.range::<u64>(bounds).map_err(|e| e.to_string())? {
            let (k, v) = item.map_err(|e| e.to_string())?;
            let entry: Entry = decode(v.value())?;
            // The key is the index: a mismatch means the table was written wrongly.
            if entry.log_id.index != k.value() {
                return Err(format!(
                    "entry at key {} expected index {}, found {}",
                    k.value(),
                    k.value(),
                    entry.log_id.index
                ));
            }
            out.push(entry);
        }
        Ok(out)
    })
    .await
    .map_err(io_read)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        read_range(&self.db, bounds).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let (last_purged, last) = blocking(&self.db, |db| {
            let last_purged: Option<LogId> = read_meta(db, KEY_LAST_PURGED)?;
            let txn = db.begin_read().map_err(|e| e.to_string())?;
            let log = txn.open_table(LOG).map_err(|e| e.to_string())?;
            let last = match log.last().map_err(|e| e.to_string())? {
                Some((_, v)) => Some(decode::<Entry>(v.value())?.log_id),
                None => None,
            };
            Ok((last_purged, last))
        })
        .await
        .map_err(io_read)?;
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let vote = *vote;
        blocking(&self.db, move |db| write_meta(db, KEY_VOTE, &vote))
            .await
            .map_err(io_write)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        blocking(&self.db, |db| read_meta(db, KEY_VOTE))
            .await
            .map_err(io_read)
    }

    /// Not fsynced (see `write_meta_lazy`): openraft treats the saved committed id as an
    /// optional hint (on open it re-applies the log up to it, and learns the rest from the
    /// leader), so a crash that loses the latest one costs a little catching up, never an
    /// entry. An fsync per commit on every member would otherwise double the directory's
    /// disk flushes.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        blocking(&self.db, move |db| {
            write_meta_lazy(db, KEY_COMMITTED, &committed)
        })
        .await
        .map_err(io_write)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let c: Option<Option<LogId>> = blocking(&self.db, |db| read_meta(db, KEY_COMMITTED))
            .await
            .map_err(io_read)?;
        Ok(c.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let records = entries
            .into_iter()
            .map(|e| encode(&e).map(|r| (e.log_id.index, r)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io_write)?;
        // One transaction for the whole batch; redb's commit is durable on return, so the
        // entries are both readable and on disk when the callback fires.
        let res = blocking(&self.db, move |db| {
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            {
                let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
                for (index, rec) in &records {
                    log.insert(*index, rec.as_slice())
                        .map_err(|e| e.to_string())?;
                }
            }
            txn.commit().map_err(|e| e.to_string())
        })
        .await;
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(reason) => {
                callback.log_io_completed(Err(std::io::Error::other(reason.clone())));
                Err(io_write(reason))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let from = log_id.index;
        blocking(&self.db, move |db| {
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            {
                let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
                log.retain_in::<u64, _>(from.., |_, _| false)
                    .map_err(|e| e.to_string())?;
            }
            txn.commit().map_err(|e| e.to_string())
        })
        .await
        .map_err(io_write)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let upto = log_id.index;
        blocking(&self.db, move |db| {
            let rec = encode(&log_id)?;
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            {
                // The purge point and the deletion commit together: no hole, no lost marker.
                let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
                meta.insert(KEY_LAST_PURGED, rec.as_slice())
                    .map_err(|e| e.to_string())?;
                let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
                log.retain_in::<u64, _>(..=upto, |_, _| false)
                    .map_err(|e| e.to_string())?;
            }
            txn.commit().map_err(|e| e.to_string())
        })
        .await
        .map_err(io_write)
    }
}
