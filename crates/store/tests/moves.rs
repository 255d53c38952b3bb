//! Tier moves reported to the owner: demotions and promotions of a store that records them.

mod common;

use common::{payload, tiny_mla};
use kvfabric_store::rope::RopeConvention;
use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{ByteCount, NamespaceKey, PutForm, Store, StoreConfig, Tier, TierMove};

#[test]
fn demotions_and_promotions_are_reported_once_and_only_when_recording() {
    let dir = tempfile::tempdir().unwrap();
    let g = tiny_mla(RopeConvention::Interleaved);
    let b = (64 + g.block_layout().payload_len).div_ceil(64) * 64;
    let mut s = Store::open(StoreConfig {
        gpu: None,
        host_capacity: ByteCount(b),
        host_region_bytes: b,
        disk: Some(DiskConfig::new(dir.path(), ByteCount(64 * b))),
    })
    .unwrap();
    let ns = NamespaceKey::derive("t");
    let seal = |s: &mut Store, seed| {
        s.seal(&ns, &g, 64, &payload(&g, seed), PutForm::Canonical)
            .unwrap()
    };
    // Not recording: a demotion leaves nothing to take.
    let first = seal(&mut s, 1);
    let second = seal(&mut s, 2);
    assert_eq!(s.counters().demotions, 1);
    assert!(s.take_moves().is_empty());

    s.record_moves(true);
    let third = seal(&mut s, 3);
    assert_eq!(
        s.take_moves(),
        [TierMove {
            slot: second.slot,
            id: second.id,
            namespace: ns,
            from: Tier::Host,
            to: Tier::Disk,
        }]
    );
    assert!(s.take_moves().is_empty(), "taken once");

    // A hit on disk promotes the block and demotes the one in RAM.
    s.get(&first.id, &ns).unwrap();
    let moves = s.take_moves();
    assert!(moves.contains(&TierMove {
        slot: third.slot,
        id: third.id,
        namespace: ns,
        from: Tier::Host,
        to: Tier::Disk,
    }));
    assert!(moves.contains(&TierMove {
        slot: first.slot,
        id: first.id,
        namespace: ns,
        from: Tier::Disk,
        to: Tier::Host,
    }));
    assert_eq!(moves.len() as u64, s.counters().promotions + 1);

    s.record_moves(false);
    seal(&mut s, 4);
    assert!(s.take_moves().is_empty());
}
