//! The Raft log and vote in an append-only write-ahead log: segment files of checksummed
//! records, one `fdatasync` per group of writes.
//!
//! Why not the redb table it replaces: openraft 0.9 waits for every append's flush inside the
//! Raft core before it replicates the entries, so a leader's flush and then a follower's sit
//! on every write's path. A redb commit (copy-on-write pages, a header, a sync) cost ~0.5 ms
//! here; a record appended to a file and synced costs ~0.25 ms.
//!
//! Layout: a directory of segments `{seq:016x}.seg`, each beginning with a [`Checkpoint`]
//! (vote, committed id and purge point as they stood), followed by records ([`frame`]):
//! entries, votes, committed ids, truncations and purges, in the order they happened. Opening
//! replays every segment in order; a torn record at the end of the last segment (a crash
//! mid-write: never acknowledged) is cut off, anywhere else it is corruption. A purge deletes
//! the segments that hold no live entry, which is safe because the next segment's checkpoint
//! carries everything replay needs from them.
//!
//! [`Wal`] is the writing side (owned by the log writer thread); [`WalReader`] is the shared
//! index that readers use while the writer goes on.

mod frame;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod migrate;
mod segment;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

pub(super) use frame::Record;
pub(super) use migrate::import_redb_log;

use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::type_config::{Entry, LogId};
use frame::{decode_record, parse, Parsed};
use segment::Active;

/// What replay needs from the segments before one: written at the start of every segment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Checkpoint {
    pub(super) vote: Option<openraft::Vote<NodeId>>,
    pub(super) committed: Option<LogId>,
    pub(super) last_purged: Option<LogId>,
}

/// Where an entry's record sits.
#[derive(Debug, Clone, Copy)]
struct Loc {
    seq: u64,
    offset: u64,
    len: u32,
    log_id: LogId,
}

/// The durable log as readers see it: every live entry's place, the segment files, and the
/// durable vote, committed id and purge point.
#[derive(Debug, Default)]
struct Index {
    entries: BTreeMap<u64, Loc>,
    files: BTreeMap<u64, Arc<File>>,
    state: Checkpoint,
}

impl Index {
    /// Applies one record found (or written) at `offset` of segment `seq`, in log order.
    fn apply(&mut self, record: &Record, seq: u64, offset: u64, len: u32) {
        match record {
            Record::Entry(e) => self.apply_entry(e.log_id, seq, offset, len),
            other => self.apply_control(other),
        }
    }

    /// An entry's record: it is live unless the log was purged past it.
    fn apply_entry(&mut self, log_id: LogId, seq: u64, offset: u64, len: u32) {
        if self
            .state
            .last_purged
            .is_some_and(|p| log_id.index <= p.index)
        {
            return;
        }
        let loc = Loc {
            seq,
            offset,
            len,
            log_id,
        };
        self.entries.insert(log_id.index, loc);
    }

    /// Any record but an entry.
    fn apply_control(&mut self, record: &Record) {
        match record {
            Record::Entry(_) => {}
            Record::Vote(v) => self.state.vote = Some(*v),
            Record::Committed(c) => self.state.committed = *c,
            Record::Truncate(from) => {
                self.entries.split_off(from);
            }
            Record::Purge(upto) => self.purge(*upto),
            Record::Checkpoint(c) => {
                self.state.vote = c.vote;
                self.state.committed = c.committed;
                if let Some(p) = c.last_purged {
                    self.purge(p);
                }
            }
        }
    }

    fn purge(&mut self, upto: LogId) {
        // The entries above `upto`: none when it is the largest index there is.
        self.entries = match upto.index.checked_add(1) {
            Some(above) => self.entries.split_off(&above),
            None => BTreeMap::new(),
        };
        if self.state.last_purged.is_none_or(|p| p.index < upto.index) {
            self.state.last_purged = Some(upto);
        }
    }
}

/// The read side of the WAL, shared with the writer.
#[derive(Debug, Clone)]
pub(super) struct WalReader {
    index: Arc<RwLock<Index>>,
}

impl WalReader {
    fn index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The durable vote, committed id and purge point.
    pub(super) fn state(&self) -> Checkpoint {
        self.index().state.clone()
    }

    /// The newest durable entry's log id.
    pub(super) fn last_log_id(&self) -> Option<LogId> {
        self.index().entries.values().next_back().map(|l| l.log_id)
    }

    /// Every durable live entry in `bounds`, in index order, each checked against its
    /// checksum and its place.
    pub(super) fn read(&self, bounds: (Bound<u64>, Bound<u64>)) -> Result<Vec<Entry>, String> {
        let locs: Vec<(Loc, Arc<File>)> = {
            let ix = self.index();
            ix.entries
                .range(bounds)
                .map(|(_, l)| {
                    let f = ix.files.get(&l.seq).cloned();
                    f.map(|f| (*l, f))
                        .ok_or_else(|| format!("segment {} of entry {} is gone", l.seq, l.log_id))
                })
                .collect::<Result<_, _>>()?
        };
        let mut out = Vec::with_capacity(locs.len());
        let mut buf = Vec::new();
        for (loc, file) in locs {
            buf.resize(loc.len as usize, 0);
            file.read_exact_at(&mut buf, loc.offset)
                .map_err(|e| format!("reading entry {}: {e}", loc.log_id))?;
            let entry = match parse(&buf) {
                Parsed::Record { kind, body, .. } => match decode_record(kind, body)? {
                    Record::Entry(e) => *e,
                    other => return Err(format!("an entry expected, found {other:?}")),
                },
                Parsed::End => return Err(format!("entry {} expected, found zeroes", loc.log_id)),
                Parsed::Bad(why) => return Err(format!("entry {}: {why}", loc.log_id)),
            };
            if entry.log_id != loc.log_id {
                return Err(format!(
                    "entry {} expected, found {}",
                    loc.log_id, entry.log_id
                ));
            }
            out.push(entry);
        }
        Ok(out)
    }
}

/// A staged record's effect on the index, applied once its group is durable: an entry (by
/// its id) or any other record, with its place in the staged bytes.
#[derive(Debug)]
enum Staged {
    Entry(LogId, usize, u32),
    Control(Record),
}

/// Frames `entry` as its WAL record (done by the caller of `append`, off the writer thread).
pub(super) fn frame_entry(entry: &Entry) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    frame::write_entry(entry, &mut out)?;
    Ok(out)
}

/// The writing side: stage records, then [`Wal::commit`] them as one durable write.
#[derive(Debug)]
pub(super) struct Wal {
    dir: PathBuf,
    active: Active,
    index: Arc<RwLock<Index>>,
    buf: Vec<u8>,
    staged: Vec<Staged>,
    /// Records past this size close the active segment ([`segment::SEGMENT_BYTES`]).
    segment_bytes: u64,
    /// The first write error: the log is unusable after it (openraft stops the member).
    failed: Option<String>,
}

/// The WAL directory that belongs with the redb file at `path`: `<path>.wal`.
pub(super) fn dir_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".wal");
    PathBuf::from(s)
}

fn corrupt(reason: String) -> DirectoryError {
    DirectoryError::Corrupt {
        what: "raft log (WAL)",
        reason,
    }
}

impl Wal {
    /// Opens the WAL in `dir` (creating it with one empty segment if absent) and replays it.
    pub(super) fn open(dir: &Path) -> Result<(Wal, WalReader), DirectoryError> {
        let storage = |e: io::Error| DirectoryError::storage("open the raft log", e);
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(storage)?;
            if let Some(parent) = dir.parent() {
                segment::sync_dir(parent).map_err(storage)?;
            }
        }
        let mut segments = segment::list(dir).map_err(storage)?;
        if segments.is_empty() {
            let mut head = Vec::new();
            Record::Checkpoint(Checkpoint::default())
                .write_to(&mut head)
                .map_err(corrupt)?;
            segment::create(dir, 1, &head).map_err(storage)?;
            segments = segment::list(dir).map_err(storage)?;
        }
        let mut index = Index::default();
        let last = segments.len() - 1;
        let mut active = None;
        for (i, (seq, path)) in segments.into_iter().enumerate() {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(i == last)
                .open(&path)
                .map_err(storage)?;
            let scanned = segment::scan(&file, |record, offset, len| {
                index.apply(record, seq, offset, len)
            })
            .map_err(storage)?;
            if !scanned.starts_with_checkpoint {
                return Err(corrupt(format!(
                    "{}: a checkpoint at offset 0 expected, found {}",
                    path.display(),
                    scanned
                        .stopped
                        .clone()
                        .unwrap_or_else(|| "another record".into())
                )));
            }
            if let Some(why) = &scanned.stopped {
                if i != last {
                    return Err(corrupt(format!(
                        "{} at offset {}: {why}",
                        path.display(),
                        scanned.end
                    )));
                }
                tracing::warn!(
                    segment = %path.display(),
                    offset = scanned.end,
                    reason = %why,
                    "raft log: cutting off a torn write at the end (never acknowledged)"
                );
            }
            if i == last {
                let file = Active::resume(seq, file, scanned.end).map_err(storage)?;
                index.files.insert(seq, file.file.clone());
                active = Some(file);
            } else {
                index.files.insert(seq, Arc::new(file));
            }
        }
        let mut active = active.expect("at least one segment");
        active.zero_ahead().map_err(storage)?;
        let index = Arc::new(RwLock::new(index));
        let wal = Wal {
            dir: dir.to_path_buf(),
            active,
            index: index.clone(),
            buf: Vec::new(),
            staged: Vec::new(),
            segment_bytes: segment::SEGMENT_BYTES,
            failed: None,
        };
        Ok((wal, WalReader { index }))
    }

    /// Stages a record other than an entry for the next [`Wal::commit`].
    pub(super) fn stage(&mut self, record: Record) -> Result<(), String> {
        debug_assert!(!matches!(record, Record::Entry(_)), "entries come framed");
        record.write_to(&mut self.buf)?;
        self.staged.push(Staged::Control(record));
        Ok(())
    }

    /// Stages an entry's record, framed by [`frame_entry`].
    pub(super) fn stage_entry(&mut self, log_id: LogId, framed: &[u8]) {
        let at = self.buf.len();
        self.buf.extend_from_slice(framed);
        self.staged
            .push(Staged::Entry(log_id, at, framed.len() as u32));
    }

    /// Writes what is staged in one durable write (starting a new segment first when the
    /// active one is full), then shows it to readers. Nothing staged: nothing written.
    pub(super) fn commit(&mut self) -> Result<(), String> {
        if let Some(e) = &self.failed {
            return Err(format!("the raft log failed earlier: {e}"));
        }
        if self.staged.is_empty() {
            return Ok(());
        }
        let result = self.write_staged();
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn write_staged(&mut self) -> Result<(), String> {
        if self.active.pos >= self.segment_bytes {
            self.rotate()
                .map_err(|e| format!("starting a segment: {e}"))?;
        }
        let base = self
            .active
            .write_durable(&self.buf)
            .map_err(|e| format!("writing the raft log: {e}"))?;
        self.buf.clear();
        let seq = self.active.seq;
        let staged = std::mem::take(&mut self.staged);
        let purged = staged
            .iter()
            .any(|s| matches!(s, Staged::Control(Record::Purge(_))));
        {
            let mut ix = self.index.write().unwrap_or_else(|p| p.into_inner());
            for s in &staged {
                match s {
                    Staged::Entry(id, at, len) => ix.apply_entry(*id, seq, base + *at as u64, *len),
                    Staged::Control(r) => ix.apply_control(r),
                }
            }
        }
        if purged {
            self.drop_dead_segments()
                .map_err(|e| format!("removing purged segments: {e}"))?;
        }
        Ok(())
    }

    /// Starts segment `seq + 1` with a checkpoint of the durable state.
    fn rotate(&mut self) -> io::Result<()> {
        let state = self
            .index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .state
            .clone();
        let mut head = Vec::new();
        Record::Checkpoint(state)
            .write_to(&mut head)
            .map_err(io::Error::other)?;
        let seq = self.active.seq + 1;
        let file = segment::create(&self.dir, seq, &head)?;
        let active = Active::resume(seq, file, head.len() as u64)?;
        self.index
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .files
            .insert(seq, active.file.clone());
        self.active = active;
        self.active.zero_ahead()
    }

    /// Deletes the segments older than the one holding the oldest live entry (or than the
    /// active one, when no entry is left): nothing in them is needed any more.
    fn drop_dead_segments(&mut self) -> io::Result<()> {
        let dead: Vec<u64> = {
            let mut ix = self.index.write().unwrap_or_else(|p| p.into_inner());
            let keep_from = ix
                .entries
                .values()
                .next()
                .map_or(self.active.seq, |l| l.seq);
            let dead: Vec<u64> = ix.files.range(..keep_from).map(|(s, _)| *s).collect();
            for s in &dead {
                ix.files.remove(s);
            }
            dead
        };
        if dead.is_empty() {
            return Ok(());
        }
        for s in &dead {
            std::fs::remove_file(self.dir.join(segment::name(*s)))?;
        }
        segment::sync_dir(&self.dir)
    }

    /// Tops up the zeroed space ahead of the write position (call when idle).
    pub(super) fn prepare(&mut self) -> Result<(), String> {
        self.active
            .zero_ahead()
            .map_err(|e| format!("zeroing raft log space: {e}"))
    }
}

#[cfg(test)]
mod tests;
