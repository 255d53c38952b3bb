//! Zero-copy puts: reserve, fill in place, seal in place.

mod common;

use common::{payload, tiny_mla};
use kvfabric_store::rope::{rotate_block, Direction, RopeConvention};
use kvfabric_store::{ByteCount, Dedup, NamespaceKey, PutForm, Store, StoreConfig, StoreError};

fn store() -> Store {
    Store::open(StoreConfig::host_only(ByteCount(1 << 20))).unwrap()
}

#[test]
fn sealing_in_place_equals_sealing_a_copy() {
    let g = tiny_mla(RopeConvention::HalfSplit);
    let ns = NamespaceKey::derive("t");
    let mut s = store();
    let mut r = s.reserve(&g).unwrap();
    r.payload_mut().copy_from_slice(&payload(&g, 1));
    let a = s.seal_reserved(r, &ns, &g, PutForm::Canonical).unwrap();
    assert_eq!(a.dedup, Dedup::New);
    let b = s
        .seal(&ns, &g, 64, &payload(&g, 1), PutForm::Canonical)
        .unwrap();
    assert_eq!((b.id, b.slot, b.dedup), (a.id, a.slot, Dedup::Shared));
    assert_eq!(
        s.read_payload(&a.id, &ns, &g, None).unwrap().0,
        payload(&g, 1)
    );
}

#[test]
fn an_equal_reservation_is_freed_and_the_block_shared() {
    let g = tiny_mla(RopeConvention::HalfSplit);
    let ns = NamespaceKey::derive("t");
    let mut s = store();
    let a = s
        .seal(&ns, &g, 64, &payload(&g, 2), PutForm::Canonical)
        .unwrap();
    let used = s.usage()[0].used;
    let mut r = s.reserve(&g).unwrap();
    assert!(s.usage()[0].used > used, "the reservation takes room");
    r.payload_mut().copy_from_slice(&payload(&g, 2));
    let b = s.seal_reserved(r, &ns, &g, PutForm::Canonical).unwrap();
    assert_eq!((b.slot, b.dedup), (a.slot, Dedup::Shared));
    assert_eq!(
        s.usage()[0].used,
        used,
        "the duplicate's room was given back"
    );
    assert_eq!(s.counts(a.slot).unwrap(), (2, 0));
}

#[test]
fn a_rotated_reservation_is_unrotated_in_place() {
    let g = tiny_mla(RopeConvention::Interleaved);
    let ns = NamespaceKey::derive("t");
    let mut rotated = payload(&g, 3);
    rotate_block(&g.block_layout(), &mut rotated, 777, Direction::Forward).unwrap();
    let mut s = store();
    let copy = s
        .seal(&ns, &g, 64, &rotated, PutForm::Rotated { position: 777 })
        .unwrap();
    let mut r = s.reserve(&g).unwrap();
    r.payload_mut().copy_from_slice(&rotated);
    let in_place = s
        .seal_reserved(r, &ns, &g, PutForm::Rotated { position: 777 })
        .unwrap();
    assert_eq!((in_place.id, in_place.dedup), (copy.id, Dedup::Shared));
}

#[test]
fn cancel_gives_room_back_and_mismatched_geometry_is_refused() {
    let g = tiny_mla(RopeConvention::Interleaved);
    let other = tiny_mla(RopeConvention::HalfSplit);
    let ns = NamespaceKey::derive("t");
    let mut s = store();
    let r = s.reserve(&g).unwrap();
    s.cancel(r).unwrap();
    assert_eq!(s.usage()[0].used, ByteCount(0));
    let r = s.reserve(&g).unwrap();
    let err = s
        .seal_reserved(r, &ns, &other, PutForm::Canonical)
        .unwrap_err();
    assert!(matches!(err, StoreError::Header(_)), "{err}");
    assert_eq!(
        s.usage()[0].used,
        ByteCount(0),
        "a refused reservation is released"
    );
    assert!(s.is_empty());
}

/// A large canonical put is hashed on a thread of its own a span behind the copy
/// (`fill_hasher`): filled in pieces of every awkward size, its id is the one-pass id of its
/// bytes; a filling cancelled halfway stops that thread before its room is handed out again,
/// and the next put into the same room seals as its own bytes.
#[test]
fn a_large_put_hashed_behind_the_copy_has_its_one_pass_id() {
    use kvfabric_store::geometry::preset::builtin_preset;
    use kvfabric_store::store::PutHashing;
    use kvfabric_store::{Blake3Ids, IdHasher, SealStep, HEADER_LEN};
    let g = builtin_preset("deepseek-v3").unwrap();
    let ns = NamespaceKey::derive("t");
    let mut s = Store::open(StoreConfig::host_only(ByteCount(12 << 20))).unwrap();
    for (seed, pieces) in [
        (1u64, [1usize, 65_535, 262_145, 7]),
        (2, [4096, 1 << 20, 3, 99_999]),
    ] {
        let p = payload(&g, seed);
        // Cancelled halfway: the thread is stopped, the room given back.
        let mut f = s
            .reserve(&g)
            .unwrap()
            .fill_as(&ns, &g, PutForm::Canonical, PutHashing::OwnThread)
            .unwrap();
        f.write(&p[..p.len() / 2]).unwrap();
        s.cancel(f.into_reservation()).unwrap();
        // Filled in pieces of the given sizes, round and round.
        let mut f = s
            .reserve(&g)
            .unwrap()
            .fill_as(&ns, &g, PutForm::Canonical, PutHashing::OwnThread)
            .unwrap();
        let mut at = 0;
        for n in pieces.iter().cycle() {
            if at == p.len() {
                break;
            }
            let end = (at + n).min(p.len());
            f.write(&p[at..end]).unwrap();
            at = end;
        }
        let prepared = f.finish().unwrap();
        let SealStep::Sealed(sealed) = s.seal_prepared(prepared).unwrap() else {
            panic!("a new block seals without a comparison");
        };
        let mut block = s.read(sealed.slot).unwrap().into_bytes();
        assert_eq!(sealed.id, Blake3Ids.id(&ns, &[&block]), "the one-pass id");
        assert!(block.split_off(HEADER_LEN) == p, "the bytes written");
    }
}
