//! Property tests of the store against a simple reference model.
//!
//! A weak id hash (2 bits) makes collisions common, so "dedup never merges different bytes" is
//! exercised on every run, not once in 2^256.

mod common;

use std::collections::{HashMap, HashSet};

use common::{payload, tiny_mla, WeakIds};
use kvfabric_store::id::IdHasher;
use kvfabric_store::rope::RopeConvention;
use kvfabric_store::store::StoreConfig;
use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{
    Blake3Ids, ByteCount, Dedup, NamespaceKey, PutForm, SlotId, Store, StoreError,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Seal { content: u8, ns: u8 },
    Release(u8),
    Pin(u8),
    Unpin(u8),
    Get { content: u8, ns: u8 },
    ForkWrite(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 0u8..2).prop_map(|(content, ns)| Op::Seal { content, ns }),
        2 => any::<u8>().prop_map(Op::Release),
        1 => any::<u8>().prop_map(Op::Pin),
        1 => any::<u8>().prop_map(Op::Unpin),
        2 => (0u8..12, 0u8..2).prop_map(|(content, ns)| Op::Get { content, ns }),
        1 => any::<u8>().prop_map(Op::ForkWrite),
    ]
}

#[derive(Debug, Clone)]
struct Model {
    bytes: Vec<u8>,
    ns: NamespaceKey,
    refs: u32,
    pins: u32,
    pinned_handle: Option<kvfabric_store::Handle>,
}

const BLOCKS_CAPACITY: u64 = 8;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Host tier only, with a 2-bit id hash: collisions on most seals.
    #[test]
    fn store_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, false)?;
    }

    /// Host and disk tiers (blake3 ids: the disk tier verifies them): demotion, promotion,
    /// eviction from disk, compaction.
    #[test]
    fn tiered_store_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, true)?;
    }
}

fn run(ops: Vec<Op>, with_disk: bool) -> Result<(), TestCaseError> {
    let g = tiny_mla(RopeConvention::Interleaved);
    let block_bytes = 64 + g.block_layout().payload_len;
    let aligned = block_bytes.div_ceil(64) * 64;
    let host_blocks = if with_disk { 3 } else { BLOCKS_CAPACITY };
    let cap = aligned * host_blocks;
    let dir = tempfile::tempdir().unwrap();
    let disk = with_disk.then(|| {
        let mut d = DiskConfig::new(
            dir.path(),
            ByteCount(4 * 4096 * (BLOCKS_CAPACITY - host_blocks)),
        );
        d.segment_bytes = 4 * 4096;
        d
    });
    let config = StoreConfig {
        gpu: None,
        host_capacity: ByteCount(cap),
        host_region_bytes: cap,
        disk,
    };
    let hasher: Box<dyn IdHasher> = if with_disk {
        Box::new(Blake3Ids)
    } else {
        Box::new(WeakIds)
    };
    let ids: &dyn IdHasher = if with_disk { &Blake3Ids } else { &WeakIds };
    let mut store = Store::open_with(config, hasher, None).unwrap();
    let namespaces = [NamespaceKey::derive("a"), NamespaceKey::derive("b")];
    let contents: Vec<Vec<u8>> = (0..12).map(|i| payload(&g, i)).collect();
    let mut model: HashMap<SlotId, Model> = HashMap::new();
    let mut held: Vec<SlotId> = Vec::new(); // one entry per reference we hold

    for op in ops {
        match op {
            Op::Seal { content, ns } => {
                let data = &contents[content as usize];
                let nsk = namespaces[ns as usize];
                let full: Vec<u8> = [&store_header(&g)[..], data].concat();
                let live_equal: Vec<SlotId> = model
                    .iter()
                    .filter(|(_, m)| m.ns == nsk && m.bytes == full)
                    .map(|(s, _)| *s)
                    .collect();
                match store.seal(&nsk, &g, 64, data, PutForm::Canonical) {
                    Ok(sealed) => {
                        if let Some(&existing) = live_equal.first() {
                            prop_assert_eq!(sealed.dedup, Dedup::Shared);
                            prop_assert_eq!(sealed.slot, existing);
                        } else {
                            prop_assert_ne!(
                                sealed.dedup,
                                Dedup::Shared,
                                "shared with nothing equal"
                            );
                            prop_assert!(!model.contains_key(&sealed.slot), "slot id reused");
                            model.insert(
                                sealed.slot,
                                Model {
                                    bytes: full,
                                    ns: nsk,
                                    refs: 0,
                                    pins: 0,
                                    pinned_handle: None,
                                },
                            );
                        }
                        model.get_mut(&sealed.slot).unwrap().refs += 1;
                        held.push(sealed.slot);
                    }
                    Err(StoreError::Full { .. }) => {
                        let stuck =
                            model.values().filter(|m| m.refs > 0 || m.pins > 0).count() as u64;
                        prop_assert!(
                            stuck >= host_blocks,
                            "Full with only {stuck} unevictable blocks"
                        );
                    }
                    Err(e) => prop_assert!(false, "seal: {e}"),
                }
            }
            Op::Release(i) if !held.is_empty() => {
                let slot = held.swap_remove(i as usize % held.len());
                store.release(slot).unwrap();
                model.get_mut(&slot).unwrap().refs -= 1;
            }
            Op::Pin(i) if !held.is_empty() => {
                let slot = held[i as usize % held.len()];
                store.pin(slot).unwrap();
                let m = model.get_mut(&slot).unwrap();
                m.pins += 1;
                m.pinned_handle = Some(store.handle(slot).unwrap());
            }
            Op::Unpin(i) => {
                let pinned: Vec<SlotId> = model
                    .iter()
                    .filter(|(_, m)| m.pins > 0)
                    .map(|(s, _)| *s)
                    .collect();
                if pinned.is_empty() {
                    continue;
                }
                let slot = pinned[i as usize % pinned.len()];
                store.unpin(slot).unwrap();
                let m = model.get_mut(&slot).unwrap();
                m.pins -= 1;
                if m.pins == 0 {
                    m.pinned_handle = None;
                }
            }
            Op::Get { content, ns } => {
                let nsk = namespaces[ns as usize];
                let full: Vec<u8> = [&store_header(&g)[..], &contents[content as usize]].concat();
                let id = ids.id(&nsk, &[&full]);
                match store.get(&id, &nsk) {
                    Ok((block, _)) => {
                        prop_assert_eq!(block.id(), id);
                        prop_assert!(
                            model
                                .values()
                                .any(|m| m.ns == nsk && m.bytes == block.bytes()),
                            "served bytes that were never sealed under this id and namespace"
                        );
                    }
                    Err(StoreError::NotFound(_)) => {
                        prop_assert!(
                            !model.values().any(|m| m.ns == nsk
                                && m.refs > 0
                                && ids.id(&nsk, &[&m.bytes]) == id),
                            "a referenced block was not found"
                        );
                    }
                    Err(e) => prop_assert!(false, "get: {e}"),
                }
            }
            Op::ForkWrite(i) if !held.is_empty() => {
                let base = held[i as usize % held.len()];
                let before = store.counts(base).unwrap().0;
                let mut draft = store.fork(base).unwrap();
                prop_assert_eq!(
                    store.counts(base).unwrap().0,
                    before + 1,
                    "fork holds a reference"
                );
                let p = store.draft_mut(&mut draft).unwrap();
                p[0] ^= 0x40; // a latent byte: still a valid bf16 payload
                prop_assert_eq!(
                    store.counts(base).unwrap().0,
                    before,
                    "copy released the base"
                );
                let base_bytes = store.read(base).unwrap().into_bytes();
                prop_assert_eq!(
                    &base_bytes,
                    &model[&base].bytes,
                    "write did not touch the base"
                );
                match store.commit(draft, &g) {
                    Ok(sealed) => {
                        let ns = model[&base].ns;
                        let bytes = store.read(sealed.slot).unwrap().into_bytes();
                        let m = model.entry(sealed.slot).or_insert_with(|| Model {
                            bytes,
                            ns,
                            refs: 0,
                            pins: 0,
                            pinned_handle: None,
                        });
                        m.refs += 1;
                        held.push(sealed.slot);
                    }
                    Err(StoreError::Full { .. }) => {}
                    Err(e) => prop_assert!(false, "commit: {e}"),
                }
            }
            _ => {}
        }
        // Reconcile: unreferenced, unpinned slots may have been evicted.
        let gone: Vec<SlotId> = model
            .keys()
            .copied()
            .filter(|s| store.counts(*s).is_err())
            .collect();
        for s in gone {
            let m = &model[&s];
            prop_assert!(
                m.refs == 0 && m.pins == 0,
                "dropped a referenced or pinned block"
            );
            model.remove(&s);
        }
        check_invariants(&mut store, &model)?;
    }
    Ok(())
}

fn store_header(g: &kvfabric_store::ModelGeometry) -> [u8; 64] {
    kvfabric_store::BlockHeader::for_geometry(g).encode()
}

fn check_invariants(
    store: &mut Store,
    model: &HashMap<SlotId, Model>,
) -> Result<(), TestCaseError> {
    for u in store.usage() {
        prop_assert!(u.used <= u.capacity, "{:?} over capacity", u.tier);
    }
    let live = store.live_slots();
    prop_assert_eq!(
        live.len(),
        model.len(),
        "store and model hold the same slots"
    );
    let mut seen = HashSet::new();
    for (i, (slot, _, h)) in live.iter().enumerate() {
        prop_assert!(seen.insert(*slot));
        for (_, _, other) in &live[i + 1..] {
            prop_assert!(!h.overlaps(other), "aliasing: {h:?} and {other:?}");
        }
        let m = &model[slot];
        prop_assert_eq!(
            store.counts(*slot).unwrap(),
            (m.refs, m.pins),
            "counts of {:?}",
            slot
        );
        if let Some(ph) = m.pinned_handle {
            prop_assert_eq!(*h, ph, "a pinned block moved");
        }
        let bytes = store.read(*slot).unwrap().into_bytes();
        prop_assert!(
            bytes == m.bytes,
            "slot {slot:?} holds other bytes than were sealed into it"
        );
    }
    Ok(())
}
