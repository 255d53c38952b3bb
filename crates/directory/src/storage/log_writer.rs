//! The log's writer thread: every write of the Raft log and vote, in order, with group commit.
//!
//! One thread per member owns redb writes of the log. Appends return as soon as their entries
//! are staged in the [`LogTail`] (readable), and their openraft callback fires when the
//! transaction holding them is on disk. Whatever is queued when the thread wakes — appends
//! from several openraft calls and the latest committed id — goes into one transaction, one
//! fsync: under load the disk flushes once per batch of Raft rounds rather than once per
//! entry, and the committed id never costs a transaction of its own. Votes, truncations and
//! purges are rare; they keep their place in the queue and their callers wait for them.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use openraft::storage::LogFlushed;
use redb::Database;
use tokio::sync::oneshot;

use super::log_tail::LogTail;
use super::records::{encode, write_meta, KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE, LOG, META};
use crate::ids::NodeId;
use crate::type_config::{LogId, TypeConfig};

/// Most queued operations folded into one transaction.
const GROUP_OPS_MAX: usize = 256;
/// How long a committed id waits for an append to ride with before it is written alone.
const COMMITTED_IDLE: Duration = Duration::from_millis(50);

type Reply = oneshot::Sender<Result<(), String>>;

/// One queued write.
pub(super) enum Op {
    /// Entries to write, already staged in the tail.
    Append(Appended),
    /// The latest committed id; written with the next append's transaction, or on its own
    /// once the queue has been quiet for `COMMITTED_IDLE`.
    Committed(Option<LogId>),
    /// A vote, durable before the reply.
    Vote(openraft::Vote<NodeId>, Reply),
    /// Delete every entry at or above the index.
    Truncate(u64, Reply),
    /// Delete every entry at or below the id, and record it as the purge point.
    Purge(LogId, Reply),
}

/// One `append` call's entries: encoded `(index, record)` pairs, their ids, and openraft's
/// flush callback.
pub(super) struct Appended {
    pub(super) records: Vec<(u64, Vec<u8>)>,
    pub(super) ids: Vec<LogId>,
    pub(super) callback: LogFlushed<TypeConfig>,
}

/// The handle: a queue into the thread, joined when the last handle goes.
pub(super) struct LogWriter {
    tx: Option<Sender<Op>>,
    thread: Option<JoinHandle<()>>,
}

impl LogWriter {
    /// Starts the writer thread of `db`, marking written entries durable in `tail`.
    pub(super) fn spawn(db: Arc<Database>, tail: Arc<Mutex<LogTail>>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run(&db, &tail, rx))?;
        Ok(LogWriter {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `op`. Fails only when the thread is gone (it never exits while handles live,
    /// unless it panicked).
    pub(super) fn send(&self, op: Op) -> Result<(), String> {
        self.tx
            .as_ref()
            .ok_or("the log writer is closed")?
            .send(op)
            .map_err(|_| "the log writer thread is gone".to_string())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        // Closing the queue ends the thread after what is queued; joining it releases the
        // database before a member is reopened on the same file.
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(db: &Database, tail: &Mutex<LogTail>, rx: Receiver<Op>) {
    let mut group = Group::default();
    loop {
        // A committed id alone waits for the next append's transaction, or for the queue to
        // stay quiet for COMMITTED_IDLE.
        let first = if group.committed.is_some() {
            match rx.recv_timeout(COMMITTED_IDLE) {
                Ok(op) => op,
                Err(RecvTimeoutError::Timeout) => {
                    group.flush(db, tail);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv() {
                Ok(op) => op,
                Err(_) => break,
            }
        };
        let mut ops = vec![first];
        while ops.len() < GROUP_OPS_MAX {
            match rx.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        for op in ops {
            match op {
                Op::Append(a) => group.appends.push(a),
                Op::Committed(c) => group.committed = Some(c),
                Op::Vote(vote, reply) => {
                    group.flush(db, tail);
                    let _ = reply.send(write_meta(db, KEY_VOTE, &vote));
                }
                Op::Truncate(from, reply) => {
                    group.flush(db, tail);
                    let _ = reply.send(truncate(db, from));
                }
                Op::Purge(upto, reply) => {
                    group.flush(db, tail);
                    let _ = reply.send(purge(db, upto));
                }
            }
        }
        if !group.appends.is_empty() {
            group.flush(db, tail);
        }
    }
    // Closed: what is left (a committed id) is written before the database is released.
    group.flush(db, tail);
}

/// Appends and a committed id gathered for one transaction.
#[derive(Default)]
struct Group {
    appends: Vec<Appended>,
    committed: Option<Option<LogId>>,
}

impl Group {
    /// Writes what is gathered in one durable transaction, then marks the entries durable
    /// and fires their callbacks, in order.
    fn flush(&mut self, db: &Database, tail: &Mutex<LogTail>) {
        if self.appends.is_empty() && self.committed.is_none() {
            return;
        }
        let appends = std::mem::take(&mut self.appends);
        let committed = self.committed.take();
        let res = write_group(db, &appends, committed);
        if res.is_ok() {
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            for a in &appends {
                t.mark_durable(&a.ids);
            }
        }
        for a in appends {
            a.callback
                .log_io_completed(res.clone().map_err(std::io::Error::other));
        }
        if let Err(e) = res {
            tracing::error!(error = %e, "raft log write failed");
        }
    }
}

fn write_group(
    db: &Database,
    appends: &[Appended],
    committed: Option<Option<LogId>>,
) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
        for a in appends {
            for (index, rec) in &a.records {
                log.insert(*index, rec.as_slice())
                    .map_err(|e| e.to_string())?;
            }
        }
        if let Some(c) = committed {
            let rec = encode(&c)?;
            let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
            meta.insert(KEY_COMMITTED, rec.as_slice())
                .map_err(|e| e.to_string())?;
        }
    }
    txn.commit().map_err(|e| e.to_string())
}

fn truncate(db: &Database, from: u64) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
        log.retain_in::<u64, _>(from.., |_, _| false)
            .map_err(|e| e.to_string())?;
    }
    txn.commit().map_err(|e| e.to_string())
}

fn purge(db: &Database, upto: LogId) -> Result<(), String> {
    let rec = encode(&upto)?;
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        // The purge point and the deletion commit together: no hole, no lost marker.
        let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
        meta.insert(KEY_LAST_PURGED, rec.as_slice())
            .map_err(|e| e.to_string())?;
        let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
        log.retain_in::<u64, _>(..=upto.index, |_, _| false)
            .map_err(|e| e.to_string())?;
    }
    txn.commit().map_err(|e| e.to_string())
}
