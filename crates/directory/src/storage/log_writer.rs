//! The log's writer thread: every write of the Raft log and vote, in order, with group commit.
//!
//! One thread per member owns the WAL's writes ([`super::wal`]). Appends return as soon as
//! their entries are staged in the [`LogTail`] (readable), and their openraft callback fires
//! when the write holding them is on disk. Whatever is queued when the thread wakes — appends
//! from several openraft calls and the latest committed id — goes into one write and one
//! `fdatasync`: under load the disk syncs once per batch of Raft rounds rather than once per
//! entry, and the committed id never costs a sync of its own. Votes, truncations and purges
//! are rare; they keep their place in the queue and their callers wait for them. When the
//! queue runs dry the thread tops up the WAL's zeroed space, off every caller's path.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use openraft::storage::LogFlushed;
use tokio::sync::oneshot;

use super::log_tail::LogTail;
use super::wal::{Record, Wal};
use crate::ids::NodeId;
use crate::type_config::{LogId, TypeConfig};

/// Most queued operations folded into one write.
const GROUP_OPS_MAX: usize = 256;
/// How long a committed id waits for an append to ride with before it is written alone.
const COMMITTED_IDLE: Duration = Duration::from_millis(50);

type Reply = oneshot::Sender<Result<(), String>>;

/// One queued write.
pub(super) enum Op {
    /// Entries to write, already staged in the tail.
    Append(Appended),
    /// The latest committed id; written with the next append's write, or on its own
    /// once the queue has been quiet for `COMMITTED_IDLE`.
    Committed(Option<LogId>),
    /// A vote, durable before the reply.
    Vote(openraft::Vote<NodeId>, Reply),
    /// Delete every entry at or above the index.
    Truncate(u64, Reply),
    /// Delete every entry at or below the id, and record it as the purge point.
    Purge(LogId, Reply),
}

/// One `append` call's entries: their ids with their framed WAL records, and openraft's flush
/// callback.
pub(super) struct Appended {
    pub(super) records: Vec<(LogId, Vec<u8>)>,
    pub(super) callback: LogFlushed<TypeConfig>,
}

/// The handle: a queue into the thread, joined when the last handle goes.
pub(super) struct LogWriter {
    tx: Option<Sender<Op>>,
    thread: Option<JoinHandle<()>>,
    #[cfg(test)]
    pub(super) hold: Arc<Hold>,
}

/// In test builds, holds the writer before its next durable write until released (to see what
/// the cluster does while a member's write is in flight), or makes it lose every write from
/// then on, as a process killed before its writes reached the disk would; nothing in other
/// builds.
#[derive(Default)]
pub(super) struct Hold {
    #[cfg(test)]
    state: Mutex<HoldState>,
    #[cfg(test)]
    released: std::sync::Condvar,
}

#[cfg(test)]
#[derive(Default)]
struct HoldState {
    held: bool,
    lost: bool,
}

impl Hold {
    /// Waits while held; whether the write must be dropped instead of made (test builds).
    fn wait(&self) -> bool {
        #[cfg(test)]
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            while s.held && !s.lost {
                s = self.released.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.lost
        }
        #[cfg(not(test))]
        false
    }

    /// Holds (`true`) or releases the writer.
    #[cfg(test)]
    pub(super) fn set(&self, on: bool) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).held = on;
        self.released.notify_all();
    }

    /// Every write from now on, the held one included, is dropped: nothing more reaches the
    /// WAL and no callback fires (the member is about to be stopped as if killed).
    #[cfg(test)]
    pub(super) fn lose(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).lost = true;
        self.released.notify_all();
    }
}

impl LogWriter {
    /// Starts the writer thread of `wal`, marking written entries durable in `tail`.
    pub(super) fn spawn(wal: Wal, tail: Arc<Mutex<LogTail>>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let hold = Arc::new(Hold::default());
        let h = hold.clone();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run(wal, &tail, &h, rx))?;
        Ok(LogWriter {
            tx: Some(tx),
            thread: Some(thread),
            #[cfg(test)]
            hold,
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
        // Closing the queue ends the thread after what is queued; joining it closes the WAL
        // before a member is reopened on the same files.
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut wal: Wal, tail: &Mutex<LogTail>, hold: &Hold, rx: Receiver<Op>) {
    let mut group = Group::default();
    loop {
        // A committed id alone waits for the next append's write, or for the queue to stay
        // quiet for COMMITTED_IDLE.
        let first = if group.committed.is_some() {
            match rx.recv_timeout(COMMITTED_IDLE) {
                Ok(op) => op,
                Err(RecvTimeoutError::Timeout) => {
                    group.flush(&mut wal, tail, hold);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.try_recv() {
                Ok(op) => op,
                Err(_) => {
                    // Idle: the moment to top up the zeroed space ahead (a MiB at a time, once
                    // per few thousand entries). Doing it after every acknowledged group
                    // instead measured ~7% fewer registrations (the next group waits for it).
                    if let Err(e) = wal.prepare() {
                        tracing::error!(error = %e, "raft log: zeroing space ahead failed");
                    }
                    match rx.recv() {
                        Ok(op) => op,
                        Err(_) => break,
                    }
                }
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
                    group.flush(&mut wal, tail, hold);
                    let _ = reply.send(write_alone(&mut wal, hold, Record::Vote(vote)));
                }
                Op::Truncate(from, reply) => {
                    group.flush(&mut wal, tail, hold);
                    let _ = reply.send(write_alone(&mut wal, hold, Record::Truncate(from)));
                }
                Op::Purge(upto, reply) => {
                    group.flush(&mut wal, tail, hold);
                    let _ = reply.send(write_alone(&mut wal, hold, Record::Purge(upto)));
                }
            }
        }
        if !group.appends.is_empty() {
            group.flush(&mut wal, tail, hold);
        }
    }
    // Closed: what is left (a committed id) is written before the WAL is closed.
    group.flush(&mut wal, tail, hold);
}

/// Writes one record durably on its own (unless writes are being lost, in tests).
fn write_alone(wal: &mut Wal, hold: &Hold, record: Record) -> Result<(), String> {
    if hold.wait() {
        return Err("the write was lost (test)".into());
    }
    wal.stage(record)?;
    wal.commit()
}

/// Appends and a committed id gathered for one write.
#[derive(Default)]
struct Group {
    appends: Vec<Appended>,
    committed: Option<Option<LogId>>,
}

impl Group {
    /// Writes what is gathered in one durable write, then marks the entries durable and
    /// fires their callbacks, in order.
    fn flush(&mut self, wal: &mut Wal, tail: &Mutex<LogTail>, hold: &Hold) {
        if self.appends.is_empty() && self.committed.is_none() {
            return;
        }
        let appends = std::mem::take(&mut self.appends);
        let committed = self.committed.take();
        if hold.wait() {
            return;
        }
        for a in &appends {
            for (id, framed) in &a.records {
                wal.stage_entry(*id, framed);
            }
        }
        let res = match committed {
            Some(c) => wal.stage(Record::Committed(c)),
            None => Ok(()),
        }
        .and_then(|()| wal.commit());
        if res.is_ok() {
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            for a in &appends {
                let ids: Vec<LogId> = a.records.iter().map(|(id, _)| *id).collect();
                t.mark_durable(&ids);
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
