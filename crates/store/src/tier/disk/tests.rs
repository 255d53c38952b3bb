//! Disk-tier behaviour: reopen ten times, torn tails at any byte, compaction (and a crash in
//! the middle of it), deleting dead segments to make room, the directory lock.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::tier::conformance::block;

fn config(dir: &Path, capacity: u64, segment_bytes: u64) -> DiskConfig {
    let mut c = DiskConfig::new(dir, ByteCount(capacity));
    c.segment_bytes = segment_bytes;
    c
}

/// What the test believes is live: handle → (id, namespace, bytes).
type Model = BTreeMap<(u32, u64), (Handle, BlockId, NamespaceKey, Vec<u8>)>;

fn key(h: &Handle) -> (u32, u64) {
    (h.region.0, h.offset)
}

/// Recovered entries must be exactly the model (no phantom, nothing missing, same handles),
/// and every one must read back equal.
fn assert_matches_model(tier: &mut DiskTier, recovered: &[RecoveredEntry], model: &Model) {
    assert_eq!(recovered.len(), model.len(), "recovered count vs model");
    for r in recovered {
        let Some((h, id, ns, bytes)) = model.get(&key(&r.handle)) else {
            panic!("phantom entry recovered: {r:?}");
        };
        assert_eq!(
            (r.handle, r.id, r.namespace),
            (*h, *id, *ns),
            "mismatched entry"
        );
        assert_eq!(
            &tier.read(h, id).expect("read recovered"),
            bytes,
            "mismatched value"
        );
    }
    assert_eq!(tier.live_blocks(), model.len());
}

#[test]
fn disk_reopen_ten_times_no_phantom_no_mismatch() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Small enough that writes hit Full and reclaim dead segments along the way.
    let cfg = config(dir.path(), 600 << 10, 48 << 10);
    let mut model = Model::new();
    let mut seed = 1u64;
    let mut reclaimed_any = false;
    for round in 0..10u64 {
        let (mut tier, recovered) = DiskTier::open(cfg.clone()).expect("reopen");
        assert_matches_model(&mut tier, &recovered, &model);
        assert_eq!(
            tier.counters().torn_tails_truncated,
            0,
            "clean shutdowns leave no torn tail"
        );
        for op in 0..40u64 {
            seed += 1;
            let free = (seed * 7 + round).is_multiple_of(3) && !model.is_empty();
            if free {
                let k = *model
                    .keys()
                    .nth((seed as usize * 13) % model.len())
                    .expect("nonempty");
                let (h, _, _, _) = model.remove(&k).expect("present");
                tier.free(&h).expect("free");
                assert!(tier.free(&h).is_err(), "double free refused");
                continue;
            }
            let (id, ns, bytes) = block(seed, 1 + ((seed * 7919) % 20_000) as usize);
            let fits = tier.can_fit(ByteCount(bytes.len() as u64));
            match tier.write(&id, &ns, &bytes) {
                Ok(h) => {
                    assert!(fits, "can_fit said no but write succeeded");
                    model.insert(key(&h), (h, id, ns, bytes));
                }
                Err(StoreError::Full { .. }) => {
                    assert!(!fits, "can_fit promised room (round {round}, op {op})");
                    // Make room the way the store would: drop the oldest half.
                    let drop: Vec<_> = model.keys().take(model.len() / 2 + 1).copied().collect();
                    for k in drop {
                        let (h, _, _, _) = model.remove(&k).expect("present");
                        tier.free(&h).expect("free");
                    }
                }
                Err(e) => panic!("write: {e}"),
            }
            assert!(
                tier.disk_bytes() <= tier.capacity(),
                "segment files exceed capacity"
            );
        }
        reclaimed_any |= tier.counters().bytes_reclaimed > 0;
        if round % 4 == 3 {
            let report = tier.compact().expect("compact");
            for (old, new) in &report.relocations {
                let v = model.remove(&key(old)).expect("relocated a live block");
                model.insert(key(new), (*new, v.1, v.2, v.3));
            }
        }
    }
    assert!(
        reclaimed_any,
        "the test never exercised reclaim; shrink the capacity"
    );
    let (mut tier, recovered) = DiskTier::open(cfg).expect("final reopen");
    assert_matches_model(&mut tier, &recovered, &model);
}

#[derive(Debug, Clone)]
enum Op {
    Write(u64, usize),
    Free(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (any::<u64>(), 1usize..3000).prop_map(|(s, l)| Op::Write(s, l)),
            1 => any::<usize>().prop_map(Op::Free),
        ],
        1..24,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Write and free, cut the segment at any byte, reopen: exactly the operations that
    /// were wholly before the cut take effect, nothing else is served.
    #[test]
    fn disk_torn_tail_at_any_byte(ops in ops(), cut_frac in 0.0f64..=1.0) {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = config(dir.path(), 64 << 20, 64 << 20);
        // (file length after the op, live set after the op)
        let mut history: Vec<(u64, Model)> = Vec::new();
        let path;
        {
            let (mut tier, _) = DiskTier::open(cfg.clone()).expect("open");
            path = tier.segment_path(RegionIndex(1)).expect("segment 1");
            let mut model = Model::new();
            history.push((tier.disk_bytes().0, model.clone()));
            for op in &ops {
                match *op {
                    Op::Write(seed, len) => {
                        let (id, ns, bytes) = block(seed, len);
                        let h = tier.write(&id, &ns, &bytes).expect("write");
                        model.insert(key(&h), (h, id, ns, bytes));
                    }
                    Op::Free(i) if !model.is_empty() => {
                        let k = *model.keys().nth(i % model.len()).expect("nonempty");
                        let (h, _, _, _) = model.remove(&k).expect("present");
                        tier.free(&h).expect("free");
                    }
                    Op::Free(_) => continue,
                }
                history.push((tier.disk_bytes().0, model.clone()));
            }
        }
        let full = history.last().expect("nonempty").0;
        let cut = (cut_frac * full as f64) as u64;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(cut))
            .expect("cut the segment");
        let (lens, models): (Vec<u64>, Vec<Model>) = history.into_iter().unzip();
        let done = lens.iter().rposition(|&l| l <= cut);
        let expected = done.map(|i| models[i].clone()).unwrap_or_default();
        let on_boundary = cut == 0 || lens.contains(&cut);

        let (mut tier, recovered) = DiskTier::open(cfg.clone()).expect("reopen after cut");
        assert_matches_model(&mut tier, &recovered, &expected);
        prop_assert_eq!(
            tier.counters().torn_tails_truncated,
            u64::from(!on_boundary),
            "cut at {} of {}, boundaries {:?}", cut, full, lens
        );
        prop_assert_eq!(tier.counters().quarantined, 0);
        // The cut segment takes appends again, and they survive another reopen.
        let (id, ns, bytes) = block(u64::MAX, 777);
        let h = tier.write(&id, &ns, &bytes).expect("write after recovery");
        let mut expected = expected;
        expected.insert(key(&h), (h, id, ns, bytes));
        drop(tier);
        let (mut tier, recovered) = DiskTier::open(cfg).expect("second reopen");
        assert_matches_model(&mut tier, &recovered, &expected);
        prop_assert_eq!(tier.counters().torn_tails_truncated, 0);
    }
}

/// Fills a tier with 40 blocks over several segments and frees all but every fifth.
fn mostly_freed(cfg: &DiskConfig) -> (DiskTier, Model) {
    let (mut tier, _) = DiskTier::open(cfg.clone()).expect("open");
    let mut model = Model::new();
    for seed in 0..40u64 {
        let (id, ns, bytes) = block(seed, 10_000 + seed as usize);
        let h = tier.write(&id, &ns, &bytes).expect("write");
        if seed % 5 == 0 {
            model.insert(key(&h), (h, id, ns, bytes));
        } else {
            tier.free(&h).expect("free");
        }
    }
    (tier, model)
}

fn apply(model: &mut Model, report: &CompactionReport) {
    for (old, new) in &report.relocations {
        let v = model.remove(&key(old)).expect("relocation of a live block");
        assert_eq!(
            new.generation, old.generation,
            "relocation keeps the generation"
        );
        model.insert(key(new), (*new, v.1, v.2, v.3));
    }
}

#[test]
fn disk_compaction_relocates_and_shrinks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 8 << 20, 64 << 10);
    let (mut tier, mut model) = mostly_freed(&cfg);
    let before = tier.disk_bytes();
    let segments_before = std::fs::read_dir(dir.path()).expect("ls").count();
    let report = tier.compact().expect("compact");
    assert_eq!(
        report.relocations.len(),
        model.len(),
        "every live block moved"
    );
    assert!(report.deferred.is_empty() && report.quarantined.is_empty());
    for (old, _) in &report.relocations {
        let id = model[&key(old)].1;
        assert!(
            matches!(tier.read(old, &id), Err(StoreError::InvalidHandle { .. })),
            "an old handle is dead after compaction"
        );
    }
    apply(&mut model, &report);
    for (h, id, _, bytes) in model.values() {
        assert_eq!(
            &tier.read(h, id).expect("read relocated"),
            bytes,
            "same bytes after moving"
        );
    }
    let after = tier.disk_bytes();
    assert!(
        after.0 * 3 < before.0,
        "on-disk bytes shrink: {before} → {after}"
    );
    assert_eq!(report.bytes_reclaimed, before.0 - after.0);
    assert!(std::fs::read_dir(dir.path()).expect("ls").count() < segments_before);
    assert_eq!(tier.counters().compactions, 1);
    assert_eq!(tier.counters().bytes_reclaimed, report.bytes_reclaimed);
    // Nothing left worth compacting.
    assert!(tier
        .compact()
        .expect("second compact")
        .relocations
        .is_empty());
    drop(tier);
    let (mut tier, recovered) = DiskTier::open(cfg).expect("reopen after compaction");
    assert_matches_model(&mut tier, &recovered, &model);
}

#[test]
fn disk_compaction_interrupted_before_deletion_serves_no_duplicate_or_freed_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 8 << 20, 64 << 10);
    let (mut tier, mut model) = mostly_freed(&cfg);
    // Keep the sources, then put them back after compaction: a crash right after the new
    // segment was renamed into place, before any source was deleted.
    let mut sources = Vec::new();
    for e in std::fs::read_dir(dir.path()).expect("ls") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "kvs") {
            let to = backup.path().join(p.file_name().expect("name"));
            std::fs::copy(&p, &to).expect("backup");
            sources.push((to, p));
        }
    }
    let report = tier.compact().expect("compact");
    apply(&mut model, &report);
    drop(tier);
    for (from, to) in &sources {
        if !to.exists() {
            std::fs::copy(from, to).expect("restore a deleted source");
        }
    }
    // A compaction output that never got renamed is dropped too.
    std::fs::write(dir.path().join("seg-99999999.tmp"), b"half written").expect("tmp");
    let (mut tier, recovered) = DiskTier::open(cfg.clone()).expect("reopen");
    assert_matches_model(&mut tier, &recovered, &model);
    assert!(
        !dir.path().join("seg-99999999.tmp").exists(),
        "leftover .tmp deleted at open"
    );
    // The duplicates are garbage: compacting again removes the restored sources, and a
    // reopen still agrees.
    let report = tier.compact().expect("compact again");
    apply(&mut model, &report);
    assert!(
        !report.segments_removed.is_empty(),
        "restored sources are compacted away"
    );
    drop(tier);
    let (mut tier, recovered) = DiskTier::open(cfg).expect("reopen again");
    assert_matches_model(&mut tier, &recovered, &model);
}

#[test]
fn disk_compaction_keeps_tombstones_whose_target_survives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 8 << 20, 64 << 10);
    let (mut tier, _) = DiskTier::open(cfg.clone()).expect("open");
    let mut model = Model::new();
    let mut first = Vec::new();
    let mut second = Vec::new();
    for seed in 0..12u64 {
        let (id, ns, bytes) = block(seed, 10_000);
        let h = tier.write(&id, &ns, &bytes).expect("write");
        model.insert(key(&h), (h, id, ns, bytes));
        if h.region.0 == 1 {
            first.push(h)
        } else {
            second.push(h)
        }
    }
    assert!(
        first.len() >= 4 && second.len() >= 4,
        "blocks span two segments"
    );
    // The tombstone of a block in segment 1 lands in a later segment, which then turns to
    // garbage and is compacted away while segment 1 (mostly live) stays.
    let dead = first[0];
    model.remove(&key(&dead));
    tier.free(&dead).expect("free");
    assert_ne!(tier.active, 1, "the tombstone went to a later segment");
    for h in &second {
        model.remove(&key(h));
        tier.free(h).expect("free");
    }
    let report = tier.compact().expect("compact");
    assert!(
        report.segments_removed.iter().all(|r| r.0 != 1),
        "segment 1 is mostly live"
    );
    assert!(!report.segments_removed.is_empty());
    apply(&mut model, &report);
    drop(tier);
    let (mut tier, recovered) = DiskTier::open(cfg).expect("reopen");
    assert_matches_model(&mut tier, &recovered, &model);
}

#[test]
fn disk_write_deletes_dead_segments_without_moving_live_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 256 << 10, 32 << 10);
    let (mut tier, _) = DiskTier::open(cfg).expect("open");
    let (id0, ns0, keep) = block(0, 20_000);
    let kept = tier
        .write(&id0, &ns0, &keep)
        .expect("write the block that stays");
    let mut freed = 0;
    for seed in 1..200u64 {
        let (id, ns, bytes) = block(seed, 20_000);
        assert!(
            tier.can_fit(ByteCount(20_000)),
            "dead segments count as room (seed {seed})"
        );
        let h = tier
            .write(&id, &ns, &bytes)
            .expect("room is made by deleting dead segments");
        tier.free(&h).expect("free");
        freed += 1;
        assert!(tier.disk_bytes() <= tier.capacity());
    }
    assert!(
        freed * 20_000 > 4 * (256 << 10),
        "the test wrote several capacities"
    );
    assert!(tier.counters().bytes_reclaimed > 0);
    assert_eq!(tier.counters().compactions, 0, "no compaction was needed");
    assert_eq!(
        tier.read(&kept, &id0).expect("the live block never moved"),
        keep
    );
}

#[test]
fn disk_full_and_too_large_have_no_side_effects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 64 << 10, 64 << 10);
    let (mut tier, _) = DiskTier::open(cfg).expect("open");
    let (id, ns, big) = block(1, 70 << 10);
    assert!(!tier.can_fit(ByteCount(big.len() as u64)));
    assert!(matches!(
        tier.write(&id, &ns, &big),
        Err(StoreError::TooLarge { .. })
    ));
    let (id, ns, bytes) = block(2, 40 << 10);
    let h = tier.write(&id, &ns, &bytes).expect("write");
    let disk = tier.disk_bytes();
    let (id2, ns2, more) = block(3, 40 << 10);
    assert!(!tier.can_fit(ByteCount(more.len() as u64)));
    assert!(matches!(
        tier.write(&id2, &ns2, &more),
        Err(StoreError::Full { .. })
    ));
    assert_eq!(
        tier.disk_bytes(),
        disk,
        "a refused write leaves no bytes behind"
    );
    // The tombstone reserve: frees on a brim-full tier still fit in the capacity.
    tier.free(&h).expect("free on a full tier");
    tier.write(&id2, &ns2, &more).expect("room again");
    let mut hs = Vec::new();
    for seed in 10.. {
        let (id, ns, bytes) = block(seed, 1000);
        if !tier.can_fit(ByteCount(1000)) {
            break;
        }
        hs.push(tier.write(&id, &ns, &bytes).expect("can_fit promised room"));
    }
    for h in &hs {
        tier.free(h).expect("free");
        assert!(
            tier.disk_bytes() <= tier.capacity(),
            "a tombstone overflowed the capacity"
        );
    }
}

#[test]
fn disk_write_refuses_bytes_that_do_not_match_the_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path(), 1 << 20, 1 << 20)).expect("open");
    let (id, ns, mut bytes) = block(1, 4096);
    bytes[9] ^= 1;
    assert!(matches!(
        tier.write(&id, &ns, &bytes),
        Err(StoreError::HashMismatch { .. })
    ));
    assert_eq!(tier.live_blocks(), 0);
}

#[test]
fn disk_read_refuses_a_handle_with_another_id_or_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path(), 1 << 20, 1 << 20)).expect("open");
    let (id, ns, bytes) = block(1, 4096);
    let h = tier.write(&id, &ns, &bytes).expect("write");
    let (other, _, _) = block(2, 10);
    assert!(matches!(
        tier.read(&h, &other),
        Err(StoreError::InvalidHandle { .. })
    ));
    let mut shifted = h;
    shifted.offset += 1;
    assert!(matches!(
        tier.read(&shifted, &id),
        Err(StoreError::InvalidHandle { .. })
    ));
    let mut shorter = h;
    shorter.len = ByteCount(h.len.0 - 1);
    assert!(matches!(
        tier.free(&shorter),
        Err(StoreError::InvalidHandle { .. })
    ));
    assert_eq!(tier.read(&h, &id).expect("still live"), bytes);
}

#[test]
fn disk_directory_is_locked_while_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 1 << 20, 1 << 20);
    let (tier, _) = DiskTier::open(cfg.clone()).expect("open");
    assert!(matches!(
        DiskTier::open(cfg.clone()),
        Err(StoreError::TierUnavailable { .. })
    ));
    drop(tier);
    DiskTier::open(cfg).expect("open after the first closed");
}

#[test]
fn disk_scrub_verifies_every_live_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tier, _) = DiskTier::open(config(dir.path(), 1 << 20, 1 << 20)).expect("open");
    let mut hs = Vec::new();
    for seed in 0..5 {
        let (id, ns, bytes) = block(seed, 3000);
        hs.push((tier.write(&id, &ns, &bytes).expect("write"), id));
    }
    let report = tier.scrub();
    assert_eq!(report.entries_verified, 5);
    assert_eq!(report.bytes_verified, ByteCount(15_000));
    assert!(report.quarantined.is_empty() && report.errors.is_empty());
    // Flip one payload byte of the third block.
    let (h, id) = hs[2];
    let path = tier.segment_path(h.region).expect("segment");
    flip(&path, h.offset + 100);
    let report = tier.scrub();
    assert_eq!(report.entries_verified, 4);
    assert_eq!(report.quarantined, vec![(id, h)]);
    assert_eq!(tier.counters().quarantined, 1);
    assert!(
        tier.read(&h, &id).is_err(),
        "a quarantined block is never served"
    );
    drop(tier);
    let (_, recovered) = DiskTier::open(config(dir.path(), 1 << 20, 1 << 20)).expect("reopen");
    assert_eq!(
        recovered.len(),
        4,
        "the quarantine tombstone keeps it out after a reopen"
    );
}

fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).expect("write byte");
}

#[test]
fn disk_large_blocks_take_the_pipelined_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), 64 << 20, 64 << 20);
    let (mut tier, _) = DiskTier::open(cfg.clone()).expect("open");
    let (id, ns, bytes) = block(1, (3 << 20) + 5);
    let h = tier.write(&id, &ns, &bytes).expect("write");
    assert_eq!(tier.read(&h, &id).expect("read"), bytes);
    let path = tier.segment_path(h.region).expect("segment");
    // A large block with the wrong bytes is hashed beside the append and cut off again.
    let (id2, ns2, mut bad) = block(2, 2 << 20);
    bad[1 << 20] ^= 1;
    let disk = tier.disk_bytes();
    assert!(matches!(
        tier.write(&id2, &ns2, &bad),
        Err(StoreError::HashMismatch { .. })
    ));
    assert_eq!(tier.disk_bytes(), disk, "accounting undone");
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        disk.0,
        "the entry was cut off"
    );
    assert_eq!(tier.live_blocks(), 1);
    // A flip deep in a large payload is caught by the pipelined read.
    flip(&path, h.offset + (3 << 20));
    assert!(matches!(
        tier.read(&h, &id),
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(tier.counters().quarantined, 1);
    drop(tier);
    let (_, recovered) = DiskTier::open(cfg).expect("reopen");
    assert!(
        recovered.is_empty(),
        "neither the refused nor the quarantined block comes back"
    );
}

#[test]
fn disk_every_append_sync_policy_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(dir.path(), 1 << 20, 64 << 10);
    cfg.sync = SyncPolicy::EveryAppend;
    let (mut tier, _) = DiskTier::open(cfg.clone()).expect("open");
    let mut model = Model::new();
    for seed in 0..12u64 {
        let (id, ns, bytes) = block(seed, 9_000);
        let h = tier.write(&id, &ns, &bytes).expect("write");
        if seed % 2 == 0 {
            tier.free(&h).expect("free");
        } else {
            model.insert(key(&h), (h, id, ns, bytes));
        }
    }
    drop(tier);
    let (mut tier, recovered) = DiskTier::open(cfg).expect("reopen");
    assert_matches_model(&mut tier, &recovered, &model);
}
