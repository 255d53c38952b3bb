//! Opening a WAL ([`Wal::open`]): segment scanning, replay, and the torn-tail cut, on
//! segment files built of the WAL's own records, garbage and damage.
//!
//! The input is read as a program: up to [`SEGMENTS_MAX`] segments, each beginning with a
//! checkpoint (or, sometimes, another record), then up to [`RECORDS_MAX`] operations: an
//! entry (the next index or any), a vote, a committed id, a truncation, a purge (near the log
//! or anywhere), garbage, zeroes or a flipped bit; then maybe a cut tail.
//!
//! Properties: open succeeds exactly when every segment begins with a whole checkpoint and
//! every segment but the last holds whole records followed by nothing but zeroes (the last
//! may end in anything: a torn write, cut off); otherwise it fails as corrupt, never another
//! way. Once open: every entry the index lists reads back (checksum and place checked) and
//! is one that was written whole; a second open finds the same state and entries; the WAL
//! takes an entry after them, which a third open finds.

use std::ops::Bound;
use std::path::Path;

use openraft::{CommittedLeaderId, EntryPayload, Vote};

use super::super::frame::{parse, Parsed, Record};
use super::super::{frame_entry, segment, Checkpoint, Wal, WalReader};
use crate::command::{Command, Request, RequestId};
use crate::error::DirectoryError;
use crate::ids::NodeId;
use crate::type_config::{Entry, LogId};
use kvfabric_store::fuzzing::{scratch_dir, Input};

/// Segments per case.
pub const SEGMENTS_MAX: u8 = 3;
/// Operations per segment.
pub const RECORDS_MAX: u8 = 12;

/// One segment file as built, and what the format says about it.
struct Built {
    bytes: Vec<u8>,
    /// Where each whole record was written: `(start, end)`, in file order.
    records: Vec<(usize, usize)>,
    /// Whether the first record written is a checkpoint.
    checkpoint_first: bool,
    /// Offsets of flipped bits.
    flips: Vec<usize>,
}

/// How the format judges a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verdict {
    /// It begins with a whole checkpoint.
    starts_with_checkpoint: bool,
    /// Its whole records are followed by zeroes only (or nothing).
    clean_end: bool,
    /// Bytes after the last whole record parse as a record anyway (garbage that happens to
    /// carry a valid checksum): the verdict is then unknown.
    lucky: bool,
}

impl Built {
    /// Walks the records as written, stopping at the first one not whole (a flip inside it,
    /// or bytes in front of it that are not a record).
    fn verdict(&self) -> Verdict {
        let mut at = 0;
        let mut whole = 0;
        for &(start, end) in &self.records {
            if start != at
                || end > self.bytes.len()
                || self.flips.iter().any(|&f| f >= start && f < end)
            {
                break;
            }
            at = end;
            whole += 1;
        }
        let rest = &self.bytes[at..];
        Verdict {
            starts_with_checkpoint: self.checkpoint_first && whole > 0,
            clean_end: rest.iter().all(|&b| b == 0),
            lucky: matches!(parse(rest), Parsed::Record { .. }),
        }
    }
}

/// The state of a case's construction.
struct Builder<'a, 'b> {
    input: &'b mut Input<'a>,
    next_index: u64,
    /// Every entry written whole (some may be cut or flipped later).
    written: Vec<Entry>,
}

fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, NodeId(node)), index)
}

impl Builder<'_, '_> {
    /// An index: the next one, or (when `any`) one from the input.
    fn index(&mut self, any: bool) -> u64 {
        if any {
            return self.input.u64();
        }
        self.next_index += 1;
        self.next_index
    }

    fn log_id(&mut self, any: bool) -> LogId {
        let who = self.input.u8();
        let index = self.index(any);
        log_id(u64::from(who >> 4), u64::from(who & 3), index)
    }

    fn entry(&mut self) -> Entry {
        let flags = self.input.u8();
        let log_id = self.log_id(flags & 1 != 0);
        let payload = if flags & 2 == 0 {
            EntryPayload::Blank
        } else {
            EntryPayload::Normal(Request {
                id: RequestId {
                    client: self.input.u64(),
                    seq: self.input.u64(),
                },
                command: Command::Join {
                    node: NodeId(u64::from(self.input.u8())),
                    until_ms: self.input.u64(),
                },
            })
        };
        Entry { log_id, payload }
    }

    fn maybe_log_id(&mut self) -> Option<LogId> {
        let flags = self.input.u8();
        (flags & 1 != 0).then(|| self.log_id(flags & 2 != 0))
    }

    fn record(&mut self, op: u8) -> Record {
        match op {
            0..=3 => {
                let e = self.entry();
                self.written.push(e.clone());
                Record::Entry(Box::new(e))
            }
            4 => Record::Vote(Vote::new(u64::from(self.input.u8()), NodeId(1))),
            5 => Record::Committed(self.maybe_log_id()),
            6 => {
                let any = self.input.u8() & 1 != 0;
                let back = u64::from(self.input.u8() % 4);
                let from = if any {
                    self.input.u64()
                } else {
                    self.next_index.saturating_sub(back)
                };
                Record::Truncate(from)
            }
            7 => {
                let any = self.input.u8() & 1 != 0;
                Record::Purge(self.log_id(any))
            }
            _ => Record::Checkpoint(Checkpoint {
                vote: (self.input.u8() & 1 != 0).then(|| Vote::new(1, NodeId(1))),
                committed: self.maybe_log_id(),
                last_purged: self.maybe_log_id(),
            }),
        }
    }

    fn write(&mut self, b: &mut Built, record: &Record) {
        let start = b.bytes.len();
        record.write_to(&mut b.bytes).expect("a record encodes");
        b.records.push((start, b.bytes.len()));
    }

    fn segment(&mut self) -> Built {
        let mut b = Built {
            bytes: Vec::new(),
            records: Vec::new(),
            checkpoint_first: true,
            flips: Vec::new(),
        };
        let first = if self.input.u8().is_multiple_of(16) {
            b.checkpoint_first = false;
            self.record(4)
        } else {
            self.record(8)
        };
        self.write(&mut b, &first);
        for _ in 0..self.input.u8() % RECORDS_MAX {
            let op = self.input.u8() % 12;
            match op {
                0..=8 => {
                    let r = self.record(op);
                    self.write(&mut b, &r);
                }
                9 => {
                    let n = usize::from(self.input.u8());
                    b.bytes.extend_from_slice(self.input.bytes(n));
                }
                10 => b
                    .bytes
                    .resize(b.bytes.len() + usize::from(self.input.u8()), 0),
                _ => {
                    let at = usize::from(self.input.u16()) % b.bytes.len();
                    b.bytes[at] ^= 1 << (self.input.u8() % 8);
                    b.flips.push(at);
                }
            }
        }
        if self.input.u8().is_multiple_of(8) {
            let cut = usize::from(self.input.u8()).min(b.bytes.len());
            b.bytes.truncate(b.bytes.len() - cut);
        }
        b
    }
}

/// Writes the case's segments into `dir`; whether open must succeed (`None`: unknown) and the
/// entries written whole.
fn build(input: &mut Input<'_>, dir: &Path) -> (Option<bool>, Vec<Entry>) {
    let mut b = Builder {
        input,
        next_index: 0,
        written: Vec::new(),
    };
    let count = 1 + b.input.u8() % SEGMENTS_MAX;
    let mut seq = 0u64;
    let mut ok = Some(true);
    for i in 0..count {
        seq += 1 + u64::from(b.input.u8() % 2);
        let built = b.segment();
        let v = built.verdict();
        let segment_ok = v.starts_with_checkpoint && (v.clean_end || i + 1 == count);
        ok = match (ok, v.lucky) {
            (_, true) | (None, _) => None,
            (Some(all), false) => Some(all && segment_ok),
        };
        std::fs::write(dir.join(segment::name(seq)), &built.bytes).expect("write a segment");
    }
    (ok, b.written)
}

fn everything(reader: &WalReader) -> Vec<Entry> {
    reader
        .read((Bound::Unbounded, Bound::Unbounded))
        .expect("every listed entry reads back")
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    let dir = scratch_dir();
    let mut input = Input::new(data);
    let (expect_ok, written) = build(&mut input, dir.path());
    let (wal, reader) = match Wal::open(dir.path()) {
        Ok(opened) => opened,
        Err(DirectoryError::Corrupt { .. }) => {
            assert_ne!(expect_ok, Some(true), "refused a WAL the format allows");
            return;
        }
        Err(other) => panic!("open succeeds or finds corruption, found {other}"),
    };
    assert_ne!(expect_ok, Some(false), "opened a WAL the format refuses");
    let (state, entries) = (reader.state(), everything(&reader));
    for e in &entries {
        assert!(written.contains(e), "an entry never written whole: {e:?}");
    }
    assert_eq!(reader.last_log_id(), entries.last().map(|e| e.log_id));
    drop((wal, reader));

    let (mut wal, reader) = Wal::open(dir.path()).expect("a second open");
    assert_eq!(reader.state(), state, "state on a second open");
    assert_eq!(everything(&reader), entries, "entries on a second open");
    let after = [entries.last().map(|e| e.log_id), state.last_purged]
        .into_iter()
        .flatten()
        .map(|l| l.index)
        .max()
        .map_or(Some(1), |i| i.checked_add(1));
    let Some(index) = after else {
        return;
    };
    let next = Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::Blank,
    };
    wal.stage_entry(next.log_id, &frame_entry(&next).expect("frames"));
    wal.commit().expect("a reopened WAL takes an entry");
    drop((wal, reader));

    let (_wal, reader) = Wal::open(dir.path()).expect("a third open");
    assert_eq!(
        everything(&reader).last(),
        Some(&next),
        "the entry appended"
    );
}
