//! The WAL against a model: every sequence of appends, truncations, purges, votes and
//! committed ids reads back the same after any number of reopens; torn writes at the end are
//! cut off and nothing acknowledged is lost; damage anywhere else is refused.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use openraft::{CommittedLeaderId, EntryPayload, Vote};
use proptest::prelude::*;

use super::*;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, NodeId(1)), index)
}

fn entry(id: LogId) -> Entry {
    Entry {
        log_id: id,
        payload: EntryPayload::Blank,
    }
}

fn open(dir: &Path, segment_bytes: u64) -> (Wal, WalReader) {
    let (mut wal, reader) = Wal::open(dir).expect("opens");
    wal.segment_bytes = segment_bytes;
    (wal, reader)
}

fn append(wal: &mut Wal, ids: &[LogId]) {
    for id in ids {
        wal.stage_entry(*id, &frame_entry(&entry(*id)).unwrap());
    }
}

fn all(reader: &WalReader) -> Vec<LogId> {
    reader
        .read((Bound::Unbounded, Bound::Unbounded))
        .expect("reads")
        .iter()
        .map(|e| e.log_id)
        .collect()
}

/// What the WAL must hold.
#[derive(Debug, Default, Clone)]
struct Model {
    entries: BTreeMap<u64, LogId>,
    state: Checkpoint,
    term: u64,
}

impl Model {
    fn next_index(&self) -> u64 {
        self.entries
            .keys()
            .next_back()
            .copied()
            .or(self.state.last_purged.map(|p| p.index))
            .map_or(1, |i| i + 1)
    }

    fn check(&self, reader: &WalReader) {
        let want: Vec<LogId> = self.entries.values().copied().collect();
        assert_eq!(all(reader), want, "entries");
        assert_eq!(reader.state(), self.state, "state");
        assert_eq!(reader.last_log_id(), want.last().copied(), "last log id");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Append(u64),
    AppendWithCommitted(u64),
    Truncate(u64),
    Purge(u64),
    Vote(u64),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..6u64).prop_map(Op::Append),
        2 => (1..6u64).prop_map(Op::AppendWithCommitted),
        1 => (0..8u64).prop_map(Op::Truncate),
        1 => (0..8u64).prop_map(Op::Purge),
        1 => (0..3u64).prop_map(Op::Vote),
        1 => Just(Op::Reopen),
    ]
}

fn run(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    // Small segments: rotation and segment deletion happen every few records.
    let seg = 400;
    let (mut wal, mut reader) = open(&path, seg);
    let mut m = Model {
        term: 1,
        ..Model::default()
    };
    for op in ops {
        match op {
            Op::Append(n) | Op::AppendWithCommitted(n) => {
                let from = m.next_index();
                let ids: Vec<LogId> = (from..from + n).map(|i| log_id(m.term, i)).collect();
                append(&mut wal, &ids);
                for id in &ids {
                    m.entries.insert(id.index, *id);
                }
                if matches!(op, Op::AppendWithCommitted(_)) {
                    let c = ids[ids.len() / 2];
                    wal.stage(Record::Committed(Some(c))).unwrap();
                    m.state.committed = Some(c);
                }
                wal.commit().unwrap();
            }
            Op::Truncate(back) => {
                let Some(&last) = m.entries.keys().next_back() else {
                    continue;
                };
                let first = *m.entries.keys().next().expect("non-empty");
                let from = last.saturating_sub(*back).max(first);
                wal.stage(Record::Truncate(from)).unwrap();
                wal.commit().unwrap();
                m.entries.split_off(&from);
                // A new leader writes what follows.
                m.term += 1;
            }
            Op::Purge(k) => {
                let Some((_, &upto)) = m.entries.iter().nth(*k as usize) else {
                    continue;
                };
                wal.stage(Record::Purge(upto)).unwrap();
                wal.commit().unwrap();
                m.entries = m.entries.split_off(&(upto.index + 1));
                m.state.last_purged = Some(upto);
            }
            Op::Vote(dt) => {
                let v = Vote::new(m.term + dt, NodeId(1 + dt));
                wal.stage(Record::Vote(v)).unwrap();
                wal.commit().unwrap();
                m.state.vote = Some(v);
            }
            Op::Reopen => {
                drop(wal);
                (wal, reader) = open(&path, seg);
            }
        }
        m.check(&reader);
        if matches!(op, Op::Purge(_)) {
            // No segment older than the oldest live entry's outlives a purge.
            let keep_from = reader
                .index()
                .entries
                .values()
                .next()
                .map_or(wal.active.seq, |l| l.seq);
            let oldest = segment::list(&path).unwrap()[0].0;
            assert!(
                oldest >= keep_from,
                "segment {oldest} kept, live from {keep_from}"
            );
        }
    }
    drop(wal);
    let (_wal, reader) = open(&path, seg);
    m.check(&reader);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn reads_back_what_the_model_holds_across_reopens(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn active_file(dir: &Path) -> std::path::PathBuf {
    segment::list(dir).unwrap().pop().unwrap().1
}

#[test]
fn a_write_torn_anywhere_is_cut_off_and_everything_before_it_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    let (mut wal, _r) = open(&path, segment::SEGMENT_BYTES);
    let before: Vec<LogId> = (1..=3).map(|i| log_id(1, i)).collect();
    append(&mut wal, &before);
    wal.stage(Record::Vote(Vote::new(1, NodeId(1)))).unwrap();
    wal.commit().unwrap();
    let end_a = wal.active.pos;
    let group: Vec<LogId> = (4..=6).map(|i| log_id(1, i)).collect();
    append(&mut wal, &group);
    wal.stage(Record::Committed(Some(group[2]))).unwrap();
    wal.commit().unwrap();
    let end_b = wal.active.pos;
    drop(wal);
    for cut in end_a..=end_b {
        let copy = dir.path().join(format!("cut-{cut}"));
        copy_dir(&path, &copy);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(active_file(&copy))
            .unwrap();
        f.set_len(cut).unwrap();
        // Garbage after the cut, as a torn page could leave.
        f.write_all_at(&[0xa5; 9], cut).unwrap();
        drop(f);
        let (mut wal, reader) = open(&copy, segment::SEGMENT_BYTES);
        // Every record of the acknowledged group stays; of the torn one, those written whole
        // before the cut (never acknowledged, so either way is right for Raft), in order.
        let want = all(&reader);
        let full = [before.clone(), group.clone()].concat();
        assert!(want.len() >= before.len(), "cut at {cut}: lost {want:?}");
        assert_eq!(want[..], full[..want.len()], "cut at {cut}");
        if cut == end_b {
            assert_eq!(want, full, "nothing cut");
            assert_eq!(reader.state().committed, Some(group[2]));
        }
        assert_eq!(reader.state().vote, Some(Vote::new(1, NodeId(1))));
        // Writing goes on from the cut, and what follows reads back after another reopen.
        let next = log_id(2, want.len() as u64 + 1);
        append(&mut wal, &[next]);
        wal.commit().unwrap();
        drop(wal);
        let (_wal, reader) = open(&copy, segment::SEGMENT_BYTES);
        assert_eq!(
            all(&reader),
            [want, vec![next]].concat(),
            "cut at {cut}, reopened"
        );
    }
}

/// The zeroed length was found by the `wal_replay` fuzz target: zeroes read as the clean end
/// of a segment, so the records after them were dropped without a word.
#[test]
fn damage_before_the_last_segment_is_refused_not_cut() {
    let mut head = Vec::new();
    Record::Checkpoint(Checkpoint::default())
        .write_to(&mut head)
        .unwrap();
    // A byte in the body of the first entry's record, which follows the checkpoint; or that
    // record's length zeroed.
    let damages: [(usize, &[u8], &str); 2] = [
        (head.len() + frame::HEADER_LEN + 2, &[0xff], "checksum"),
        (head.len(), &[0; 4], "zeroes followed by data"),
    ];
    for (at, bytes, why) in damages {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let (mut wal, _r) = open(&path, 200);
        for i in 1..=20 {
            append(&mut wal, &[log_id(1, i)]);
            wal.commit().unwrap();
        }
        drop(wal);
        let segments = segment::list(&path).unwrap();
        assert!(segments.len() >= 2, "{} segments", segments.len());
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&segments[0].1)
            .unwrap();
        f.write_all_at(bytes, at as u64).unwrap();
        drop(f);
        match Wal::open(&path) {
            Err(DirectoryError::Corrupt { what, reason }) => {
                assert_eq!(what, "raft log (WAL)");
                assert!(reason.contains(why), "{reason}");
            }
            other => panic!("expected a corrupt WAL, found {:?}", other.map(|_| ())),
        }
    }
}

/// Found by the `wal_replay` fuzz target: a purge up to the largest index overflowed (a
/// panic, or in release builds a purge of nothing).
#[test]
fn a_purge_up_to_the_largest_index_purges_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    let (mut wal, reader) = open(&path, segment::SEGMENT_BYTES);
    append(&mut wal, &[log_id(1, 1), log_id(1, 2)]);
    let last = log_id(1, u64::MAX);
    wal.stage(Record::Purge(last)).unwrap();
    wal.commit().unwrap();
    assert_eq!(all(&reader), []);
    drop((wal, reader));
    let (_wal, reader) = open(&path, segment::SEGMENT_BYTES);
    assert_eq!(all(&reader), []);
    assert_eq!(reader.state().last_purged, Some(last));
}

#[test]
fn a_damaged_entry_is_refused_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    let (mut wal, reader) = open(&path, segment::SEGMENT_BYTES);
    append(&mut wal, &[log_id(1, 1), log_id(1, 2)]);
    wal.commit().unwrap();
    let loc = reader.index().entries[&2];
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(active_file(&path))
        .unwrap();
    f.write_all_at(&[0x5a], loc.offset + loc.len as u64 - 1)
        .unwrap();
    let err = reader
        .read((Bound::Included(1), Bound::Unbounded))
        .unwrap_err();
    assert!(err.contains("checksum"), "{err}");
}

#[test]
fn a_purge_deletes_the_segments_it_emptied_and_reopens_from_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    let (mut wal, reader) = open(&path, 300);
    wal.stage(Record::Vote(Vote::new(7, NodeId(2)))).unwrap();
    wal.commit().unwrap();
    let ids: Vec<LogId> = (1..=40).map(|i| log_id(7, i)).collect();
    for id in &ids {
        append(&mut wal, &[*id]);
        wal.commit().unwrap();
    }
    let before = segment::list(&path).unwrap().len();
    wal.stage(Record::Purge(ids[29])).unwrap();
    wal.commit().unwrap();
    let after = segment::list(&path).unwrap().len();
    assert!(
        after < before,
        "{before} segments before the purge, {after} after"
    );
    assert_eq!(all(&reader), ids[30..].to_vec());
    drop(wal);
    let (_wal, reader) = open(&path, 300);
    assert_eq!(all(&reader), ids[30..].to_vec());
    let state = reader.state();
    assert_eq!(
        state.vote,
        Some(Vote::new(7, NodeId(2))),
        "the vote survives its segment"
    );
    assert_eq!(state.last_purged, Some(ids[29]));
}

#[test]
fn after_a_write_error_every_later_write_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal");
    let (mut wal, _r) = open(&path, segment::SEGMENT_BYTES);
    wal.failed = Some("disk gone".into());
    append(&mut wal, &[log_id(1, 1)]);
    let err = wal.commit().unwrap_err();
    assert!(err.contains("disk gone"), "{err}");
}
