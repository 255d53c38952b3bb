//! The Raft log and vote in the WAL ([`super::wal`]): openraft's `RaftLogStorage`.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, OnceLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, Vote};
use tokio::sync::oneshot;

use super::log_tail::LogTail;
use super::log_writer::{Appended, LogWriter, Op};
use super::records::{io_read, io_write};
use super::wal::{frame_entry, Wal, WalReader};
use crate::ids::NodeId;
use crate::preappend::Tap;
use crate::type_config::{Entry, LogId, StorageError, TypeConfig};

/// The log store of one member. Cheap to clone: clones share the WAL's index, the in-memory
/// tail and the writer thread (joined when the last clone goes).
#[derive(Clone)]
pub struct LogStore {
    wal: WalReader,
    tail: Arc<Mutex<LogTail>>,
    writer: Arc<LogWriter>,
    /// Where appends of this member's own entries go for early replication, once installed.
    preappend: Arc<OnceLock<Tap>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    pub(super) fn new(wal: Wal, reader: WalReader) -> std::io::Result<LogStore> {
        let tail = Arc::new(Mutex::new(LogTail::default()));
        let writer = Arc::new(LogWriter::spawn(wal, tail.clone())?);
        Ok(LogStore {
            wal: reader,
            tail,
            writer,
            preappend: Arc::new(OnceLock::new()),
        })
    }

    /// Hands every later append of entries this member proposed to `tap` (see
    /// [`crate::preappend`]). Once per store; a second tap is ignored.
    pub(crate) fn install_preappend(&self, tap: Tap) {
        let _ = self.preappend.set(tap);
    }

    /// Holds this member's log writer before its next durable write (`true`) or releases it.
    #[cfg(test)]
    pub(crate) fn hold_writes(&self, on: bool) {
        self.writer.hold.set(on);
    }

    /// Drops this member's log writes from now on, a held one included, as a kill before they
    /// reached the disk would; the member is then stopped and reopened on what its WAL holds.
    #[cfg(test)]
    pub(crate) fn lose_writes(&self) {
        self.writer.hold.lose();
    }

    /// Whether this member has never voted nor held an entry: a brand-new member, the only
    /// kind openraft lets form a cluster.
    pub(crate) fn is_blank(&self) -> bool {
        self.wal.state().vote.is_none() && self.last_log_id().is_none()
    }

    /// The newest entry's id: the tail's (staged, newer than the WAL's index) when it holds
    /// any, else the WAL's, else the purge point's.
    fn last_log_id(&self) -> Option<LogId> {
        let staged_last = self.tail().last_log_id();
        staged_last
            .or_else(|| self.wal.last_log_id())
            .or(self.wal.state().last_purged)
    }

    /// Every entry in `range` that is still in the log (for tests and tools that audit it).
    pub async fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, StorageError> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        self.read(bounds).await
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, LogTail> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tail's part of `bounds` from memory, the part below the tail from the WAL.
    async fn read(&self, bounds: (Bound<u64>, Bound<u64>)) -> Result<Vec<Entry>, StorageError> {
        let (first, from_tail) = {
            let t = self.tail();
            (t.first_index(), t.read(bounds))
        };
        let below = match (first, bounds) {
            (None, _) => bounds,
            (Some(first), (Bound::Included(s), _)) if s >= first => return Ok(from_tail),
            (Some(first), (Bound::Excluded(s), _)) if s >= first => return Ok(from_tail),
            // The range ends below the tail: all of it is in the table.
            (Some(first), (start, Bound::Included(e))) if e < first => (start, Bound::Included(e)),
            (Some(first), (start, Bound::Excluded(e))) if e <= first => (start, Bound::Excluded(e)),
            (Some(first), (start, _)) => (start, Bound::Excluded(first)),
        };
        let wal = self.wal.clone();
        let mut out = tokio::task::spawn_blocking(move || wal.read(below))
            .await
            .map_err(|e| io_read(format!("blocking task: {e}")))?
            .map_err(io_read)?;
        out.extend(from_tail);
        Ok(out)
    }

    /// Queues `op` and waits for the writer's answer.
    async fn write(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<(), String>>) -> Op,
    ) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.writer.send(op(tx))?;
        rx.await
            .map_err(|_| "the log writer dropped a reply".to_string())?
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        self.read(bounds).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState {
            last_purged_log_id: self.wal.state().last_purged,
            last_log_id: self.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let vote = *vote;
        self.write(|reply| Op::Vote(vote, reply))
            .await
            .map_err(io_write)
    }

    /// The saved vote, never as a committed one, so that no member resumes leading a term
    /// across a restart.
    ///
    /// openraft 0.9 starts a member whose saved vote is its own committed one as leader at
    /// once, in the same term. With pre-appends ([`crate::preappend`]) the voters may hold
    /// entries of that term that the member's own log lost (sent beside its write, which a kill
    /// cut short); the entries it wrote next would take their ids, and one id would name two
    /// commands, applied at one index by different members. Uncommitted, the vote still
    /// refuses every other candidate of its term and accepts its leader's appends, so the
    /// member starts as a follower and leads again only by winning an election in a later
    /// term, as Raft itself prescribes. openraft reads the vote only when it starts.
    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.wal.state().vote.map(|v| Vote {
            committed: false,
            ..v
        }))
    }

    /// Queued, not awaited: the writer puts the latest committed id into its next
    /// write (see `log_writer`). openraft treats the saved committed id as an optional
    /// hint (on open it re-applies the log up to it, and learns the rest from the leader), so
    /// a crash that loses the latest one costs a little catching up, never an entry.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.writer.send(Op::Committed(committed)).map_err(io_write)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.wal.state().committed)
    }

    /// Stages the entries in the tail (readable on return) and queues their write; the
    /// callback fires when the write holding them is on disk.
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let records = entries
            .iter()
            .map(|e| frame_entry(e).map(|r| (e.log_id, r)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(io_write)?;
        // The log's last id before these entries (appends come one at a time from the core).
        let prev = self.last_log_id();
        self.tail().stage(&entries).map_err(io_write)?;
        if let Some(tap) = self.preappend.get() {
            tap.offer(prev, &entries);
        }
        self.writer
            .send(Op::Append(Appended { records, callback }))
            .map_err(io_write)
    }

    /// Drops the suffix from the tail at once and waits for the truncation's record, so that
    /// no reader finds a truncated entry afterwards.
    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let from = log_id.index;
        self.tail().truncate(from);
        self.write(|reply| Op::Truncate(from, reply))
            .await
            .map_err(io_write)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.tail().purge(log_id.index);
        self.write(|reply| Op::Purge(log_id, reply))
            .await
            .map_err(io_write)
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::ids::ShardId;
    use crate::storage::log_tail::TAIL_DURABLE_MAX;
    use crate::storage::{open_store, SnapshotTrigger};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, NodeId(1)), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    /// Reads below the tail, across it and inside it return exactly the range asked for
    /// (replication asks for bounded ranges; openraft asserts it gets no more).
    #[tokio::test]
    async fn reads_return_exactly_the_range_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _sm) = open_store(
            &dir.path().join("log.redb"),
            ShardId(0),
            Arc::new(SnapshotTrigger::new(100_000)),
        )
        .await
        .unwrap();
        let n = TAIL_DURABLE_MAX as u64 + 100;
        for i in 1..=n {
            log.blocking_append([entry(i)]).await.unwrap();
        }
        let first = log.tail().first_index().expect("a tail");
        assert!(first > 50, "the oldest durable entries left the tail");
        let mut reader = log.get_log_reader().await;
        for (range, want) in [
            ((10, 40), (10..40).collect::<Vec<u64>>()),
            ((first - 5, first + 5), (first - 5..first + 5).collect()),
            ((first + 1, first + 9), (first + 1..first + 9).collect()),
            ((1, n + 1), (1..=n).collect()),
        ] {
            let got = reader.try_get_log_entries(range.0..range.1).await.unwrap();
            assert_eq!(indexes(&got), want, "range {}..{}", range.0, range.1);
        }
        let got = reader.try_get_log_entries(10..=first - 1).await.unwrap();
        assert_eq!(indexes(&got), (10..first).collect::<Vec<u64>>());
        let got = reader.try_get_log_entries(first..).await.unwrap();
        assert_eq!(indexes(&got), (first..=n).collect::<Vec<u64>>());
    }
}
