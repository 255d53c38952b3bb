//! The store across host and disk: demotion, promotion, pins, eviction, recovery, corruption.

mod common;

use common::{payload, tiny_mla};
use kvfabric_store::rope::RopeConvention;
use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{
    ByteCount, ModelGeometry, NamespaceKey, PutForm, Sealed, Store, StoreConfig, StoreError, Tier,
};

fn block_bytes(g: &ModelGeometry) -> u64 {
    (64 + g.block_layout().payload_len).div_ceil(64) * 64
}

/// A store whose host tier holds `host_blocks` blocks and whose disk holds about `disk_blocks`.
fn store(dir: &std::path::Path, host_blocks: u64, disk_blocks: u64) -> (Store, ModelGeometry) {
    let g = tiny_mla(RopeConvention::Interleaved);
    let b = block_bytes(&g);
    let config = StoreConfig {
        gpu: None,
        host_capacity: ByteCount(b * host_blocks),
        host_region_bytes: b * host_blocks,
        disk: Some(DiskConfig::new(
            dir,
            ByteCount((b + 512) * disk_blocks + 4096),
        )),
    };
    (Store::open(config).expect("open"), g)
}

fn seal(s: &mut Store, g: &ModelGeometry, seed: u64) -> Sealed {
    s.seal(
        &NamespaceKey::derive("t"),
        g,
        64,
        &payload(g, seed),
        PutForm::Canonical,
    )
    .expect("seal")
}

fn tier_of(s: &Store, sealed: &Sealed) -> Tier {
    s.handle(sealed.slot).unwrap().tier
}

#[test]
fn full_host_demotes_to_disk_and_a_hit_promotes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, g) = store(dir.path(), 2, 16);
    let sealed: Vec<Sealed> = (0..5).map(|i| seal(&mut s, &g, i)).collect();
    let on_host = sealed
        .iter()
        .filter(|x| tier_of(&s, x) == Tier::Host)
        .count();
    assert_eq!(on_host, 2, "the host tier holds what fits");
    assert_eq!(s.counters().demotions, 3);
    for u in s.usage() {
        assert!(u.used <= u.capacity, "{:?} over capacity", u.tier);
    }
    let cold = sealed
        .iter()
        .find(|x| tier_of(&s, x) == Tier::Disk)
        .unwrap();
    let ns = NamespaceKey::derive("t");
    let (block, tier) = s.get(&cold.id, &ns).unwrap();
    assert_eq!(tier, Tier::Disk, "served from where it was");
    assert_eq!(
        &block.bytes()[64..],
        &payload(&g, sealed.iter().position(|x| x == cold).unwrap() as u64)[..]
    );
    assert_eq!(tier_of(&s, cold), Tier::Host, "a disk hit is promoted");
    assert_eq!(s.counters().promotions, 1);
    assert_eq!(s.counters().hits, [0, 0, 1]);
}

#[test]
fn pinned_blocks_never_move_and_new_blocks_land_below() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, g) = store(dir.path(), 2, 16);
    let a = seal(&mut s, &g, 1);
    let b = seal(&mut s, &g, 2);
    s.pin(a.slot).unwrap();
    s.pin(b.slot).unwrap();
    let (ha, hb) = (s.handle(a.slot).unwrap(), s.handle(b.slot).unwrap());
    let c = seal(&mut s, &g, 3);
    assert_eq!(tier_of(&s, &c), Tier::Disk, "the highest tier with room");
    let ns = NamespaceKey::derive("t");
    s.get(&c.id, &ns).unwrap();
    assert_eq!(
        tier_of(&s, &c),
        Tier::Disk,
        "no promotion that would move a pinned block"
    );
    assert_eq!(
        (s.handle(a.slot).unwrap(), s.handle(b.slot).unwrap()),
        (ha, hb)
    );
    s.unpin(a.slot).unwrap();
    s.get(&c.id, &ns).unwrap();
    assert_eq!(
        tier_of(&s, &c),
        Tier::Host,
        "promoted once a host block may move"
    );
    assert_eq!(tier_of(&s, &a), Tier::Disk, "the unpinned block made room");
    assert_eq!(s.handle(b.slot).unwrap(), hb, "the pinned one did not move");
    assert!(matches!(
        s.unpin(c.slot),
        Err(StoreError::Underflow { what: "pin", .. })
    ));
}

#[test]
fn unreferenced_blocks_are_evicted_referenced_ones_never() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, g) = store(dir.path(), 1, 3);
    let kept: Vec<Sealed> = (0..2).map(|i| seal(&mut s, &g, i)).collect();
    for i in 10..30 {
        let x = seal(&mut s, &g, i);
        s.release(x.slot).unwrap(); // cached, unreferenced
    }
    assert!(s.counters().evictions > 0, "unreferenced blocks made room");
    let ns = NamespaceKey::derive("t");
    for (i, k) in kept.iter().enumerate() {
        let (b, _) = s.get(&k.id, &ns).unwrap();
        assert_eq!(
            &b.bytes()[64..],
            &payload(&g, i as u64)[..],
            "referenced blocks survive"
        );
    }
    // Fill every place with referenced blocks: the next seal is refused, nothing is lost.
    let mut held = Vec::new();
    let err = loop {
        match s.seal(
            &ns,
            &g,
            64,
            &payload(&g, 100 + held.len() as u64),
            PutForm::Canonical,
        ) {
            Ok(x) => held.push(x),
            Err(e) => break e,
        }
        assert!(held.len() < 100, "capacity is finite");
    };
    assert!(matches!(err, StoreError::Full { .. }), "got {err}");
    for k in kept.iter().chain(&held) {
        assert!(s.get(&k.id, &ns).is_ok(), "a referenced block was dropped");
    }
}

#[test]
fn reopen_recovers_disk_blocks_with_a_reference() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<_> = {
        let (mut s, g) = store(dir.path(), 1, 16);
        let v: Vec<Sealed> = (0..4).map(|i| seal(&mut s, &g, i)).collect();
        v.iter()
            .filter(|x| tier_of(&s, x) == Tier::Disk)
            .map(|x| x.id)
            .collect()
    };
    assert_eq!(ids.len(), 3);
    let (mut s, g) = store(dir.path(), 1, 16);
    assert_eq!(s.counters().recovered, 3);
    let ns = NamespaceKey::derive("t");
    for id in &ids {
        let slot = *s.slots_of(id, &ns).first().expect("recovered");
        assert_eq!(s.counts(slot).unwrap(), (1, 0), "held for the node");
        let (payload_back, _) = s.read_payload(id, &ns, &g, None).unwrap();
        assert!((0..4).any(|i| payload(&g, i) == payload_back));
    }
}

#[test]
fn corrupt_disk_bytes_are_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, g) = store(dir.path(), 1, 16);
    let a = seal(&mut s, &g, 1);
    let b = seal(&mut s, &g, 2);
    assert_eq!(tier_of(&s, &a), Tier::Disk);
    // Flip one payload byte of every segment file, far from the headers.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let mut bytes = std::fs::read(&p).unwrap();
        if bytes.len() > 2000 {
            let at = bytes.len() - 1000;
            bytes[at] ^= 1;
            std::fs::write(&p, bytes).unwrap();
        }
    }
    let ns = NamespaceKey::derive("t");
    assert!(
        matches!(s.get(&a.id, &ns), Err(StoreError::NotFound(_))),
        "corrupt copy not served"
    );
    assert_eq!(s.counters().verify_failures, 1);
    assert_eq!(s.counters().disk.quarantined, 1);
    assert!(
        s.get(&b.id, &ns).is_ok(),
        "the host copy of another block still serves"
    );
}
