//! The collision path, in a build whose ids collide (`--features colliding-ids`: every id keeps
//! 4 bits of its digest). Two different payloads under one id are two blocks: the second seal
//! says `collision`, `dedup_collisions` counts it, both are served exactly (from the host tier
//! and, after demotion, from the disk tier, whose reads verify ids), and each dedups only with
//! its own bytes.
//!
//! `cargo test -p kvfabric-store --features colliding-ids --test collisions`
#![cfg(feature = "colliding-ids")]

mod common;

use common::{payload, tiny_mla};
use kvfabric_store::id::COLLIDING_ID_BITS;
use kvfabric_store::rope::RopeConvention;
use kvfabric_store::store::StoreConfig;
use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{
    Blake3Ids, BlockHeader, ByteCount, Dedup, IdHasher, NamespaceKey, PutForm, Store, Tier,
    VerifiedBlock, HEADER_LEN,
};

/// A payload, other than `first`'s, whose id under `ns` is the same.
fn colliding_with(g: &kvfabric_store::ModelGeometry, ns: &NamespaceKey, first: u64) -> Vec<u8> {
    let header = BlockHeader::for_geometry(g).encode();
    let id = |p: &[u8]| Blake3Ids.id(ns, &[&header, p]);
    let target = id(&payload(g, first));
    (first + 1..first + 10_000)
        .map(|seed| payload(g, seed))
        .find(|p| id(p) == target)
        .expect("16 ids in all: a collision within a few dozen payloads")
}

#[test]
fn ids_keep_only_four_bits() {
    assert_eq!(COLLIDING_ID_BITS, 4);
    let g = tiny_mla(RopeConvention::Interleaved);
    let ns = NamespaceKey::derive("t");
    let mut ids = std::collections::HashSet::new();
    for seed in 0..200 {
        let id = Blake3Ids.id(&ns, &[&payload(&g, seed)]);
        assert!(
            id.0[0] & 0x0f == 0 && id.0[1..].iter().all(|b| *b == 0),
            "{id}"
        );
        ids.insert(id);
    }
    assert!(ids.len() <= 16 && ids.len() > 8, "{} ids", ids.len());
}

#[test]
fn a_second_put_of_other_bytes_under_the_same_id_is_a_collision_and_both_are_served() {
    let g = tiny_mla(RopeConvention::Interleaved);
    let ns = NamespaceKey::derive("t");
    let a = payload(&g, 1);
    let b = colliding_with(&g, &ns, 1);
    assert_ne!(a, b);
    let dir = tempfile::tempdir().unwrap();
    let block = HEADER_LEN as u64 + g.block_layout().payload_len;
    // Room for two blocks on the host: two more seals push `a` and `b` down to disk.
    let aligned = block.div_ceil(64) * 64;
    let config = StoreConfig {
        gpu: None,
        host_capacity: ByteCount(2 * aligned),
        host_region_bytes: 2 * aligned,
        disk: Some(DiskConfig::new(dir.path(), ByteCount(1 << 20))),
    };
    let mut s = Store::open(config).unwrap();

    let first = s.seal(&ns, &g, 64, &a, PutForm::Canonical).unwrap();
    assert_eq!(first.dedup, Dedup::New);
    let second = s.seal(&ns, &g, 64, &b, PutForm::Canonical).unwrap();
    assert_eq!(second.dedup, Dedup::Collision);
    assert_eq!(second.id, first.id, "same id");
    assert_ne!(second.slot, first.slot, "its own block");
    assert_eq!(second.bytes, ByteCount(block));
    let c = s.counters();
    assert_eq!((c.dedup_collisions, c.seals_new, c.seals_shared), (1, 1, 0));
    assert_eq!(s.slots_of(&first.id, &ns), [first.slot, second.slot]);

    // Each is served exactly, header and payload.
    let header = BlockHeader::for_geometry(&g).encode();
    for (slot, bytes) in [(first.slot, &a), (second.slot, &b)] {
        let got = s.read(slot).unwrap();
        assert_eq!(got.id(), first.id);
        assert_eq!(&got.bytes()[..HEADER_LEN], &header[..]);
        assert!(
            got.payload() == &bytes[..],
            "slot {slot:?} serves its own bytes"
        );
        // Its bytes verify under the (shared) id.
        VerifiedBlock::verify(ns, first.id, got.bytes().to_vec()).unwrap();
    }

    // Demoted to disk (whose reads hash the bytes against the id), both still come back exactly.
    // Other blocks (ids other than theirs) are sealed until the eviction policy has moved both.
    let on_disk = |s: &Store| {
        [first.slot, second.slot]
            .iter()
            .all(|slot| s.handle(*slot).unwrap().tier == Tier::Disk)
    };
    let others = (100..10_000)
        .map(|seed| payload(&g, seed))
        .filter(|p| Blake3Ids.id(&ns, &[&header, p]) != first.id)
        .take(12);
    for p in others {
        if on_disk(&s) {
            break;
        }
        // (They may collide among themselves: 16 ids in all.)
        s.seal(&ns, &g, 64, &p, PutForm::Canonical).unwrap();
    }
    assert!(on_disk(&s), "both demoted");
    for (slot, bytes) in [(first.slot, &a), (second.slot, &b)] {
        assert!(s.read(slot).unwrap().payload() == &bytes[..]);
    }
    // Puts of either again dedup with their own bytes (compared with the disk copies), never
    // across.
    let before = s.counters();
    let again_b = s.seal(&ns, &g, 64, &b, PutForm::Canonical).unwrap();
    assert_eq!((again_b.dedup, again_b.slot), (Dedup::Shared, second.slot));
    let again_a = s.seal(&ns, &g, 64, &a, PutForm::Canonical).unwrap();
    assert_eq!((again_a.dedup, again_a.slot), (Dedup::Shared, first.slot));
    let c = s.counters();
    assert_eq!(c.dedup_collisions, before.dedup_collisions);
    assert_eq!(c.seals_shared, before.seals_shared + 2);
    assert_eq!(s.counts(first.slot).unwrap().0, 2);
    assert_eq!(s.counts(second.slot).unwrap().0, 2);
    assert_eq!(c.verify_failures, 0);
}

#[test]
fn a_third_colliding_put_is_counted_again() {
    let g = tiny_mla(RopeConvention::HalfSplit);
    let ns = NamespaceKey::derive("t");
    let a = payload(&g, 40);
    let b = colliding_with(&g, &ns, 40);
    let header = BlockHeader::for_geometry(&g).encode();
    let id_a = Blake3Ids.id(&ns, &[&header, &a]);
    let c = (0..10_000u64)
        .map(|seed| payload(&g, 1_000_000 + seed))
        .find(|p| *p != a && *p != b && Blake3Ids.id(&ns, &[&header, p]) == id_a)
        .unwrap();
    let mut s = Store::open(StoreConfig::host_only(ByteCount(16 << 20))).unwrap();
    let dedups: Vec<Dedup> = [&a, &b, &c]
        .iter()
        .map(|p| s.seal(&ns, &g, 64, p, PutForm::Canonical).unwrap().dedup)
        .collect();
    assert_eq!(dedups, [Dedup::New, Dedup::Collision, Dedup::Collision]);
    assert_eq!(s.counters().dedup_collisions, 2);
    assert_eq!(s.slots_of(&id_a, &ns).len(), 3);
    // Another namespace is another key: the same bytes are new there.
    let other = NamespaceKey::derive("u");
    assert_eq!(
        s.seal(&other, &g, 64, &b, PutForm::Canonical)
            .unwrap()
            .dedup,
        Dedup::New
    );
}
