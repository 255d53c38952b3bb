//! Recovery at open: scan each segment's entry headers (seeking over payloads), cut torn
//! tails, resync past corrupt headers, verify each segment's last entry in full, and rebuild
//! the index (live blocks, copies, tombstones) from what survived.
//!
//! Payloads other than each segment's last are not read here; they are verified when read,
//! scrubbed or compacted. So open costs one header read per entry plus one payload per
//! segment, and no payload is read twice.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::path::Path;

use super::entry::{EntryHeader, EntryKind, ENTRY_HEADER_LEN, ENTRY_MAGIC};
use super::report::DiskCounters;
use super::segment::{
    check_segment_header, parse_file_name, segment_file_name, Segment, TombstoneRec,
    SEGMENT_HEADER_LEN,
};
use super::LiveEntry;
use crate::error::StoreError;
use crate::handle::Tier;

const HEADER_BYTES: usize = EntryHeader::serialized_len();
/// Bytes read at a time while searching for the next valid header.
const RESYNC_WINDOW_BYTES: usize = 1 << 20;

/// The index rebuilt from a directory.
#[derive(Debug)]
pub(super) struct Recovery {
    pub(super) segments: BTreeMap<u32, Segment>,
    pub(super) live: HashMap<u64, LiveEntry>,
    pub(super) copies: HashMap<u64, Vec<u32>>,
    pub(super) next_seq: u64,
    pub(super) next_segment: u32,
}

/// Recovers every segment in `dir`, counting what it cuts, skips and quarantines.
pub(super) fn recover(dir: &Path, counters: &mut DiskCounters) -> Result<Recovery, StoreError> {
    let list_err = |e| StoreError::io(format!("disk tier: list {}", dir.display()), e);
    let mut numbers = Vec::new();
    let mut max_number = 0u32;
    for item in std::fs::read_dir(dir).map_err(list_err)? {
        let item = item.map_err(list_err)?;
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = parse_file_name(name, false) {
            numbers.push(n);
            max_number = max_number.max(n);
        } else if let Some(n) = parse_file_name(name, true) {
            // Compaction output never renamed into place: its sources are all still here.
            std::fs::remove_file(item.path()).map_err(|e| {
                StoreError::io(format!("disk tier: delete {}", item.path().display()), e)
            })?;
            max_number = max_number.max(n);
        }
    }
    numbers.sort_unstable();
    let next_segment = max_number
        .checked_add(1)
        .ok_or_else(|| StoreError::TierUnavailable {
            tier: Tier::Disk,
            reason: "segment numbers exhausted".into(),
        })?;

    let mut scanned = Vec::with_capacity(numbers.len());
    for n in numbers {
        scanned.push(scan_segment(dir, n, counters)?);
    }
    let killed: HashSet<u64> = scanned
        .iter()
        .flat_map(|(_, entries)| entries.iter())
        .filter(|(_, h)| h.kind == EntryKind::Tombstone)
        .map(|(_, h)| h.target_seq)
        .collect();

    let mut rec = Recovery {
        segments: BTreeMap::new(),
        live: HashMap::new(),
        copies: HashMap::new(),
        next_seq: 1,
        next_segment,
    };
    // Ascending segment order: of several copies of one entry, the highest segment's wins.
    for (mut seg, entries) in scanned {
        let n = seg.number;
        for (offset, h) in entries {
            rec.next_seq = rec.next_seq.max(h.seq.saturating_add(1));
            match h.kind {
                EntryKind::Block => {
                    seg.blocks.push(h.seq);
                    rec.copies.entry(h.seq).or_default().push(n);
                    if !killed.contains(&h.seq) {
                        let e = LiveEntry {
                            segment: n,
                            offset,
                            len: h.payload_len,
                            id: h.id,
                            namespace: h.namespace,
                        };
                        rec.live.insert(h.seq, e);
                    }
                }
                EntryKind::Tombstone => seg.tombstones.push(TombstoneRec {
                    seq: h.seq,
                    target: h.target_seq,
                    id: h.id,
                    namespace: h.namespace,
                }),
            }
        }
        rec.segments.insert(n, seg);
    }
    for e in rec.live.values() {
        if let Some(seg) = rec.segments.get_mut(&e.segment) {
            seg.live_count += 1;
            seg.live_bytes += e.entry_bytes();
        }
    }
    Ok(rec)
}

type Scanned = (Segment, Vec<(u64, EntryHeader)>);

/// Scans one segment; returns it (cut to its intact prefix) and its entries in file order.
fn scan_segment(dir: &Path, n: u32, counters: &mut DiskCounters) -> Result<Scanned, StoreError> {
    let path = dir.join(segment_file_name(n));
    let open_err = |e| StoreError::io(format!("disk tier: open segment {}", path.display()), e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(open_err)?;
    let len = file.metadata().map_err(open_err)?.len();
    let mut seg = Segment::from_file(n, path.clone(), file, len);
    if len < SEGMENT_HEADER_LEN {
        // Killed while creating the segment: nothing in it was ever acknowledged.
        if len > 0 {
            counters.torn_tails_truncated += 1;
        }
        seg.reset()?;
        seg.sync()?;
        return Ok((seg, Vec::new()));
    }
    let mut head = [0u8; SEGMENT_HEADER_LEN as usize];
    seg.read_at(&mut head, 0)?;
    if check_segment_header(&head, n).is_err() {
        // Entries carry their own checksums; scan them anyway.
        counters.headers_skipped += 1;
    }

    let mut entries: Vec<(u64, EntryHeader)> = Vec::new();
    let mut torn = false;
    let mut at = SEGMENT_HEADER_LEN;
    let mut hb = [0u8; HEADER_BYTES];
    while at < len {
        if len - at < ENTRY_HEADER_LEN {
            torn = true;
            break;
        }
        seg.read_at(&mut hb, at)?;
        match EntryHeader::decode(&hb) {
            Ok(h) if h.entry_len() <= len - at => {
                entries.push((at, h));
                at += h.entry_len();
            }
            // A valid header whose payload runs past the end: the append in progress.
            Ok(_) => {
                torn = true;
                break;
            }
            Err(_) => match resync(&seg, at + 1, len)? {
                Some(next) => {
                    counters.headers_skipped += 1;
                    at = next;
                }
                // Nothing valid follows: a torn (or garbled) tail.
                None => {
                    torn = true;
                    break;
                }
            },
        }
    }
    // Cuts go right after the last whole entry: bytes a resync skipped before the torn (or
    // quarantined) entry would otherwise stay as the tail, with new entries appended after.
    if torn {
        seg.truncate(intact_end(&entries))?;
        seg.sync()?;
        counters.torn_tails_truncated += 1;
    }
    // Only the last entry can be half-written with its length complete (power loss with
    // deferred sync): verify it in full. A mismatch there is quarantined by cutting it off,
    // together with any bytes skipped before it.
    if let Some(&(offset, h)) = entries.last() {
        if h.kind == EntryKind::Block {
            let (_, found) =
                seg.read_hashed(offset + ENTRY_HEADER_LEN, h.payload_len, &h.namespace)?;
            if found != h.id {
                counters.quarantined += 1;
                entries.pop();
                seg.truncate(intact_end(&entries))?;
                seg.sync()?;
            }
        }
    }
    Ok((seg, entries))
}

/// Where the last of `entries` ends (the segment header's end when there is none).
fn intact_end(entries: &[(u64, EntryHeader)]) -> u64 {
    entries
        .last()
        .map_or(SEGMENT_HEADER_LEN, |&(offset, h)| offset + h.entry_len())
}

/// The offset of the next decodable entry header at or after `from`, if any.
fn resync(seg: &Segment, from: u64, len: u64) -> Result<Option<u64>, StoreError> {
    let mut buf = vec![0u8; RESYNC_WINDOW_BYTES];
    let mut start = from;
    while start + ENTRY_HEADER_LEN <= len {
        let n = (len - start).min(RESYNC_WINDOW_BYTES as u64) as usize;
        seg.read_at(&mut buf[..n], start)?;
        for i in 0..=n - ENTRY_MAGIC.len() {
            if buf[i..i + ENTRY_MAGIC.len()] != ENTRY_MAGIC {
                continue;
            }
            let q = start + i as u64;
            if q + ENTRY_HEADER_LEN > len {
                return Ok(None);
            }
            let mut hb = [0u8; HEADER_BYTES];
            if i + HEADER_BYTES <= n {
                hb.copy_from_slice(&buf[i..i + HEADER_BYTES]);
            } else {
                seg.read_at(&mut hb, q)?;
            }
            if EntryHeader::decode(&hb).is_ok() {
                return Ok(Some(q));
            }
        }
        if start + n as u64 >= len {
            break;
        }
        // Overlap by magic length − 1 so a magic straddling two windows is still seen.
        start += (n - (ENTRY_MAGIC.len() - 1)) as u64;
    }
    Ok(None)
}
