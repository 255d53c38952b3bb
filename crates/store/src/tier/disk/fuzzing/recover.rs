//! A disk tier's recovery at open ([`DiskTier::open`]) from segment files built of the
//! tier's own entries, garbage and damage.
//!
//! The input is read as a program: up to [`SEGMENTS_MAX`] segments (header valid, garbled,
//! renamed, or cut short by a crash at creation; sometimes a compaction's `.tmp` left over),
//! each of up to [`ENTRIES_MAX`] operations: a block entry (small, or large enough for the
//! two-thread read; its bytes hashing to its id or not; sometimes a copy reusing an earlier
//! sequence number), a tombstone of an earlier block, garbage, zeroes, a flipped bit, a header
//! whose payload is cut, a checksummed header with inconsistent fields; then maybe a cut tail.
//!
//! Properties: open succeeds whatever the files hold and deletes the leftover `.tmp`; with no
//! damage, it finds exactly what a model of the format says (the highest copy of each block
//! entry no tombstone names, less each segment's last entry when its bytes do not match) with
//! the expected counters. Always: every block found reads back hashing to its id or is
//! quarantined as [`StoreError::Corrupt`] naming it; a second open finds exactly what the
//! first kept and cuts no torn tail; the tier then takes a block, numbered after everything
//! found, which a third open finds and reads back.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::super::segment::{
    encode_segment_header, segment_file_name, temp_file_name, SEGMENT_HEADER_LEN,
};
use super::super::{DiskConfig, DiskTier, EntryHeader, RecoveredEntry};
use crate::error::StoreError;
use crate::fuzzing::{scratch_dir, Input};
use crate::hash_parallel::TWO_THREADS_MIN_BYTES;
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// Segments per case.
pub const SEGMENTS_MAX: u8 = 3;
/// Operations per segment.
pub const ENTRIES_MAX: u8 = 8;
/// Largest small payload.
const SMALL_PAYLOAD_BYTES_MAX: u16 = 4096;
/// A payload that takes the two-thread read path.
const LARGE_PAYLOAD_BYTES: usize = TWO_THREADS_MIN_BYTES + 4097;
/// The tier's capacity: far above what a case writes.
const CAPACITY_BYTES: u64 = 1 << 30;

/// A block entry as written.
#[derive(Debug, Clone, Copy)]
struct Block {
    seq: u64,
    id: BlockId,
    namespace: NamespaceKey,
    /// Whether its bytes hash to its id.
    intact: bool,
}

#[derive(Debug)]
enum Written {
    Block(Block),
    Tombstone { target: u64 },
}

/// What the files hold, as far as the model goes.
#[derive(Debug, Default)]
struct Plan {
    /// Segment number → its whole entries in file order (none for one cut short at creation).
    segments: BTreeMap<u32, Vec<Written>>,
    /// Whether anything but whole, well-formed entries went into a segment: the model then
    /// says nothing about what recovery finds.
    damaged: bool,
    /// Segment headers that do not check out.
    bad_headers: u64,
    /// Segments cut short at creation but not empty (counted as torn tails when reset).
    torn_creations: u64,
    /// A compaction output left over, which open must delete.
    temp: Option<String>,
}

/// The state of a case's construction.
struct Builder<'a, 'b> {
    input: &'b mut Input<'a>,
    plan: Plan,
    next_seq: u64,
    /// Sequence numbers of the block entries written so far.
    blocks: Vec<u64>,
}

fn namespaces() -> [NamespaceKey; 2] {
    [
        NamespaceKey::derive("fuzz-a"),
        NamespaceKey::derive("fuzz-b"),
    ]
}

impl Builder<'_, '_> {
    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// A block entry (large, or `flags`-chosen), appended to `file`.
    fn block(&mut self, file: &mut Vec<u8>, large: bool) -> Block {
        let flags = self.input.u8();
        let len = if large {
            LARGE_PAYLOAD_BYTES
        } else {
            usize::from(self.input.u16() % (SMALL_PAYLOAD_BYTES_MAX + 1))
        };
        let fill = self.input.u8();
        let payload: Vec<u8> = (0..len).map(|i| fill ^ (i as u8)).collect();
        let namespace = namespaces()[usize::from(flags & 1)];
        let intact = flags & 2 == 0;
        let mut id = Blake3Ids.id(&namespace, &[&payload]);
        if !intact {
            id.0[0] ^= 1;
        }
        let seq = match (flags & 4 != 0, self.blocks.len()) {
            (true, n) if n > 0 => self.blocks[usize::from(self.input.u8()) % n],
            _ => self.seq(),
        };
        self.blocks.push(seq);
        file.extend_from_slice(&EntryHeader::block(seq, id, namespace, len as u64).encode());
        file.extend_from_slice(&payload);
        Block {
            seq,
            id,
            namespace,
            intact,
        }
    }

    /// One operation on `file`; what it wrote whole, if anything.
    fn operation(&mut self, file: &mut Vec<u8>) -> Option<Written> {
        let op = self.input.u8() % 16;
        if op <= 8 {
            return Some(Written::Block(self.block(file, op == 8)));
        }
        if op <= 10 {
            let n = self.blocks.len();
            if n == 0 {
                return None;
            }
            let target = self.blocks[usize::from(self.input.u8()) % n];
            let seq = self.seq();
            let [ns, _] = namespaces();
            file.extend_from_slice(
                &EntryHeader::tombstone(seq, target, BlockId([0; 32]), ns).encode(),
            );
            return Some(Written::Tombstone { target });
        }
        self.plan.damaged = true;
        match op {
            11 => {
                let n = usize::from(self.input.u8());
                file.extend_from_slice(self.input.bytes(n));
            }
            12 if !file.is_empty() => {
                let at = usize::from(self.input.u16()) % file.len();
                file[at] ^= 1 << (self.input.u8() % 8);
            }
            13 => {
                let mut whole = Vec::new();
                self.block(&mut whole, false);
                let cut = usize::from(self.input.u16()) % whole.len();
                file.extend_from_slice(&whole[..cut]);
            }
            14 => {
                // Checksummed, but a tombstone naming itself.
                let seq = self.seq();
                let [ns, _] = namespaces();
                file.extend_from_slice(
                    &EntryHeader::tombstone(seq, seq, BlockId([0; 32]), ns).encode(),
                );
            }
            _ => file.resize(file.len() + usize::from(self.input.u8()), 0),
        }
        None
    }

    /// Segment `number`: its header, its operations, maybe a cut.
    fn segment(&mut self, number: u32) -> Vec<u8> {
        let header = encode_segment_header(number);
        let mut file = Vec::new();
        match self.input.u8() % 4 {
            0 => {
                // Killed while creating it: shorter than a header, reset at open.
                let n = usize::from(self.input.u8()) % SEGMENT_HEADER_LEN as usize;
                self.plan.torn_creations += u64::from(n > 0);
                self.plan.segments.insert(number, Vec::new());
                return header[..n].to_vec();
            }
            1 => file.extend_from_slice(&self.input.array::<{ SEGMENT_HEADER_LEN as usize }>()),
            2 => file.extend_from_slice(&encode_segment_header(number + 1)),
            _ => file.extend_from_slice(&header),
        }
        if file[..] != header[..] {
            self.plan.bad_headers += 1;
        }
        let mut entries = Vec::new();
        for _ in 0..self.input.u8() % ENTRIES_MAX {
            entries.extend(self.operation(&mut file));
        }
        if self.input.u8().is_multiple_of(8) {
            let cut = usize::from(self.input.u8()).min(file.len());
            file.truncate(file.len() - cut);
            self.plan.damaged |= cut > 0;
        }
        self.plan.segments.insert(number, entries);
        file
    }
}

/// Writes the case's segment files into `dir`; what they hold.
fn build(input: &mut Input<'_>, dir: &Path) -> Plan {
    let mut b = Builder {
        input,
        plan: Plan::default(),
        next_seq: 1,
        blocks: Vec::new(),
    };
    let mut number = 0u32;
    for _ in 0..=b.input.u8() % SEGMENTS_MAX {
        number += 1 + u32::from(b.input.u8() % 2);
        let file = b.segment(number);
        std::fs::write(dir.join(segment_file_name(number)), file).expect("write a segment");
    }
    if b.input.u8().is_multiple_of(8) {
        let name = temp_file_name(number + 1);
        let garbage = b.input.bytes(64);
        std::fs::write(dir.join(&name), garbage).expect("write a leftover");
        b.plan.temp = Some(name);
    }
    b.plan
}

impl Plan {
    /// What an undamaged directory recovers to: the live blocks by sequence number, and how
    /// many last entries open quarantines.
    fn expected(&self) -> (BTreeMap<u64, Block>, u64) {
        let mut quarantined = 0;
        let mut kept: Vec<&[Written]> = Vec::new();
        for entries in self.segments.values() {
            let mut entries = &entries[..];
            if let Some((Written::Block(b), rest)) = entries.split_last() {
                if !b.intact {
                    quarantined += 1;
                    entries = rest;
                }
            }
            kept.push(entries);
        }
        let killed: HashSet<u64> = kept
            .iter()
            .flat_map(|e| e.iter())
            .filter_map(|w| match w {
                Written::Tombstone { target } => Some(*target),
                Written::Block(_) => None,
            })
            .collect();
        let mut live = BTreeMap::new();
        for w in kept.iter().flat_map(|e| e.iter()) {
            if let Written::Block(b) = w {
                if !killed.contains(&b.seq) {
                    live.insert(b.seq, *b);
                }
            }
        }
        (live, quarantined)
    }
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    let dir = scratch_dir();
    let mut input = Input::new(data);
    let plan = build(&mut input, dir.path());
    let config = DiskConfig::new(dir.path(), ByteCount(CAPACITY_BYTES));
    let (mut tier, found) = DiskTier::open(config.clone()).expect("open recovers any files");
    if let Some(name) = &plan.temp {
        assert!(!dir.path().join(name).exists(), "{name} left in place");
    }
    let model = (!plan.damaged).then(|| plan.expected());
    if let Some((live, quarantined)) = &model {
        let got: Vec<_> = found
            .iter()
            .map(|r| (r.handle.generation, r.id, r.namespace))
            .collect();
        let want: Vec<_> = live.values().map(|b| (b.seq, b.id, b.namespace)).collect();
        assert_eq!(got, want, "recovered blocks");
        let c = tier.counters();
        assert_eq!(c.quarantined, *quarantined, "last entries quarantined");
        assert_eq!(
            c.torn_tails_truncated, plan.torn_creations,
            "segments cut at creation"
        );
        assert_eq!(c.headers_skipped, plan.bad_headers, "bad segment headers");
    }
    let mut kept: Vec<RecoveredEntry> = Vec::new();
    for r in &found {
        let intact = model
            .as_ref()
            .map(|(live, _)| live[&r.handle.generation].intact);
        match tier.read(&r.handle, &r.id) {
            Ok(bytes) => {
                assert_eq!(Blake3Ids.id(&r.namespace, &[&bytes]), r.id, "served bytes");
                assert_ne!(
                    intact,
                    Some(false),
                    "served a block whose bytes do not match"
                );
                kept.push(*r);
            }
            Err(StoreError::Corrupt { id, .. }) => {
                assert_eq!(id, r.id, "the quarantine names the block");
                assert_ne!(intact, Some(true), "quarantined an intact block");
            }
            Err(other) => panic!("a verified read or a quarantine expected, found {other}"),
        }
    }
    drop(tier);

    let (mut tier, again) = DiskTier::open(config.clone()).expect("a second open");
    assert_eq!(again, kept, "a second open finds what the first kept");
    assert_eq!(
        tier.counters().torn_tails_truncated,
        0,
        "torn tail on a second open"
    );
    let namespace = namespaces()[0];
    let payload = input.bytes(64).to_vec();
    let id = Blake3Ids.id(&namespace, &[&payload]);
    let handle = tier
        .write(&id, &namespace, &payload)
        .expect("a recovered tier takes a block");
    assert!(
        again
            .iter()
            .all(|r| r.handle.generation < handle.generation),
        "a new block numbered after every block found"
    );
    drop(tier);

    let (mut tier, last) = DiskTier::open(config).expect("a third open");
    assert_eq!(
        last.last().map(|r| (r.id, r.handle)),
        Some((id, handle)),
        "the new block"
    );
    assert_eq!(
        tier.read(&handle, &id).expect("reads the new block"),
        payload
    );
}
