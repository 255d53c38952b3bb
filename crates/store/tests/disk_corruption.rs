//! Disk tier under corrupted bytes: a flipped payload is quarantined and never served; a
//! flipped entry header is skipped at open and the entries after it survive; a quarantined or
//! torn last entry is cut together with the bytes skipped before it.

use std::os::unix::fs::FileExt;
use std::path::Path;

use kvfabric_store::tier::disk::{DiskConfig, DiskTier, ENTRY_HEADER_LEN};
use kvfabric_store::{
    Blake3Ids, BlockId, ByteCount, Handle, IdHasher, NamespaceKey, StoreError, TierBackend,
};

fn block(seed: u64, len: usize) -> (BlockId, NamespaceKey, Vec<u8>) {
    let ns = NamespaceKey::derive("corruption");
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    (Blake3Ids.id(&ns, &[&bytes]), ns, bytes)
}

fn flip(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read byte");
    b[0] ^= 0xff;
    f.write_all_at(&b, at).expect("write byte");
}

fn config(dir: &Path) -> DiskConfig {
    DiskConfig::new(dir, ByteCount(16 << 20))
}

/// Five blocks in one segment.
fn five(tier: &mut DiskTier) -> Vec<(Handle, BlockId, Vec<u8>)> {
    (0..5)
        .map(|seed| {
            let (id, ns, bytes) = block(seed, 50_000 + seed as usize);
            (tier.write(&id, &ns, &bytes).expect("write"), id, bytes)
        })
        .collect()
}

#[test]
fn disk_flipped_payload_is_quarantined_and_never_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path())).expect("open");
    let blocks = five(&mut tier);
    let (h, id, _) = &blocks[2];
    let path = tier.segment_path(h.region).expect("segment");
    flip(&path, h.offset + 12_345);

    match tier.read(h, id) {
        Err(StoreError::Corrupt {
            id: bad,
            segment,
            offset,
            reason,
        }) => {
            assert_eq!(bad, *id);
            assert_eq!(segment, path, "names the segment");
            assert_eq!(
                offset,
                h.offset - ENTRY_HEADER_LEN,
                "names the entry's offset"
            );
            assert!(reason.contains("hashes to"), "says why: {reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(tier.counters().quarantined, 1);
    assert!(
        matches!(tier.read(h, id), Err(StoreError::InvalidHandle { .. })),
        "a quarantined entry is gone from the index: its bytes are never served"
    );
    assert_eq!(tier.counters().quarantined, 1, "counted once");
    for (i, (h, id, bytes)) in blocks.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert_eq!(
            &tier.read(h, id).expect("other blocks still served"),
            bytes,
            "block {i}"
        );
    }
    assert_eq!(tier.live_blocks(), 4);

    drop(tier);
    let (mut tier, recovered) = DiskTier::open(config(dir.path())).expect("reopen");
    assert_eq!(
        recovered.len(),
        4,
        "the quarantined entry stays out after a reopen"
    );
    assert!(recovered.iter().all(|r| r.id != *id));
    for r in &recovered {
        tier.read(&r.handle, &r.id).expect("survivors verify");
    }
}

#[test]
fn disk_flipped_entry_header_is_skipped_at_open_and_later_entries_survive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path())).expect("open");
    let blocks = five(&mut tier);
    let path = tier.segment_path(blocks[1].0.region).expect("segment");
    drop(tier);
    // Flip a byte of the second entry's payload-length field: without the header checksum,
    // every later entry would be misparsed.
    flip(&path, blocks[1].0.offset - ENTRY_HEADER_LEN + 25);

    let (mut tier, recovered) = DiskTier::open(config(dir.path())).expect("reopen");
    let c = tier.counters();
    assert_eq!(c.headers_skipped, 1, "the bad header is counted");
    assert_eq!(c.torn_tails_truncated, 0);
    assert_eq!(c.quarantined, 0);
    let ids: Vec<BlockId> = recovered.iter().map(|r| r.id).collect();
    let expected: Vec<BlockId> = blocks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, b)| b.1)
        .collect();
    assert_eq!(ids, expected, "every entry but the damaged one, in order");
    for (r, (h, _, bytes)) in recovered
        .iter()
        .zip(blocks.iter().filter(|b| b.1 != blocks[1].1))
    {
        assert_eq!(r.handle, *h, "same place as before");
        assert_eq!(&tier.read(&r.handle, &r.id).expect("read"), bytes);
    }
}

#[test]
fn disk_flipped_segment_header_is_counted_and_entries_survive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path())).expect("open");
    let blocks = five(&mut tier);
    let path = tier.segment_path(blocks[0].0.region).expect("segment");
    drop(tier);
    flip(&path, 3);
    let (mut tier, recovered) = DiskTier::open(config(dir.path())).expect("reopen");
    assert_eq!(tier.counters().headers_skipped, 1);
    assert_eq!(recovered.len(), 5);
    for (r, (_, _, bytes)) in recovered.iter().zip(&blocks) {
        assert_eq!(&tier.read(&r.handle, &r.id).expect("read"), bytes);
    }
}

#[test]
fn disk_flipped_last_payload_is_quarantined_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path())).expect("open");
    let blocks = five(&mut tier);
    let (h, id, _) = &blocks[4];
    let path = tier.segment_path(h.region).expect("segment");
    drop(tier);
    // Full length, wrong bytes: what power loss under deferred sync can leave at the tail.
    flip(&path, h.offset + 7);
    let (mut tier, recovered) = DiskTier::open(config(dir.path())).expect("reopen");
    assert_eq!(
        tier.counters().quarantined,
        1,
        "the last entry is verified at open"
    );
    assert_eq!(recovered.len(), 4);
    assert!(recovered.iter().all(|r| r.id != *id));
    // The tail it occupied takes new appends.
    let (id, ns, bytes) = block(99, 1000);
    let h = tier.write(&id, &ns, &bytes).expect("write");
    assert_eq!(
        h.offset, blocks[4].0.offset,
        "appended where the quarantined entry was"
    );
    assert_eq!(tier.read(&h, &id).expect("read"), bytes);
}

/// Found by the `disk_recover` fuzz target: a garbled header right before a last entry that
/// open quarantines, or before a torn one, used to stay behind as the segment's tail: new
/// blocks went after it (to be skipped again at every open), and with nothing after it the
/// next open cut it as a torn tail.
#[test]
fn disk_cut_at_open_takes_the_skipped_bytes_before_the_last_entry() {
    for torn in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut tier, _) = DiskTier::open(config(dir.path())).expect("open");
        let blocks = five(&mut tier);
        let path = tier.segment_path(blocks[0].0.region).expect("segment");
        drop(tier);
        flip(&path, blocks[3].0.offset - ENTRY_HEADER_LEN + 40);
        if torn {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open");
            f.set_len(blocks[4].0.offset + 10).expect("cut");
        } else {
            flip(&path, blocks[4].0.offset + 7);
        }

        let (mut tier, recovered) = DiskTier::open(config(dir.path())).expect("reopen");
        let c = tier.counters();
        let cut = (c.headers_skipped, c.quarantined, c.torn_tails_truncated);
        assert_eq!(cut, (1, u64::from(!torn), u64::from(torn)), "torn {torn}");
        assert_eq!(recovered.len(), 3, "blocks 0, 1 and 2");
        let (id, ns, bytes) = block(99, 1000);
        let h = tier.write(&id, &ns, &bytes).expect("write");
        assert_eq!(
            h.offset, blocks[3].0.offset,
            "appended where the skipped entry began"
        );
        drop(tier);

        let (mut tier, recovered) = DiskTier::open(config(dir.path())).expect("open again");
        assert_eq!(
            tier.counters().torn_tails_truncated,
            0,
            "no tail left to cut"
        );
        assert_eq!(recovered.last().map(|r| r.handle), Some(h));
        assert_eq!(tier.read(&h, &id).expect("read"), bytes);
    }
}
