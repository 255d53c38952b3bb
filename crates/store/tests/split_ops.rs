//! Property tests of the split operations a shared store's owner runs with its lock released:
//! reservations filled and hashed outside the store ([`Filling`]), dedup comparisons on pinned
//! views ([`Comparison`]), host reads served from pinned views ([`PinnedRead`]), disk reads
//! run outside ([`kvfabric_store::DiskRead`]), demotions written outside ([`Demotion`]), all
//! begun and ended in any interleaving.
//!
//! Invariants: a pinned view's bytes never change while it is held (nothing frees, moves or
//! writes a pinned slot, nor hands its range to a reservation); every sealed block reads back
//! as its content, whichever tier it went to; dedup never merges different bytes (a 2-bit id
//! hash on the host-only store makes id collisions common); and once everything in flight has
//! ended and every reference is released, the whole host tier can be freed again (no room is
//! leaked by a cancelled, sealed or compared reservation or by a demotion).

mod common;

use common::{payload, tiny_mla, WeakIds};
use kvfabric_store::id::IdHasher;
use kvfabric_store::rope::RopeConvention;
use kvfabric_store::store::StoreConfig;
use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{
    Blake3Ids, ByteCount, Comparison, Demotion, Filling, NamespaceKey, PinnedRead, PutForm,
    ReadStep, RoomStep, SealStep, SlotId, Store, Tier, HEADER_LEN,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Reserve (if the host has room now) and write the first half of a content.
    BeginPut { content: u8, ns: u8 },
    /// Write the rest of a filling, hash it and decide dedup (maybe a comparison to run).
    FinishPut(u8),
    /// Give a filling's room back.
    CancelPut(u8),
    /// Run a comparison and seal.
    Compare(u8),
    /// Begin reading a held block (a pinned view of a host block; a disk block is read,
    /// verified and finished at once).
    Read(u8),
    /// Check a pinned view and hand it back.
    EndRead(u8),
    /// One step towards room for a block in the host tier (maybe a demotion to run).
    Room,
    /// Run a demotion and finish it.
    Demote(u8),
    /// Drop one reference.
    Release(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..2).prop_map(|(content, ns)| Op::BeginPut { content, ns }),
        4 => any::<u8>().prop_map(Op::FinishPut),
        1 => any::<u8>().prop_map(Op::CancelPut),
        2 => any::<u8>().prop_map(Op::Compare),
        3 => any::<u8>().prop_map(Op::Read),
        2 => any::<u8>().prop_map(Op::EndRead),
        2 => Just(Op::Room),
        2 => any::<u8>().prop_map(Op::Demote),
        2 => any::<u8>().prop_map(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Host tier only, a 2-bit id hash: most seals compare against a colliding block.
    #[test]
    fn split_operations_keep_bytes_and_room_host_only(ops in proptest::collection::vec(op(), 1..150)) {
        run(ops, false)?;
    }

    /// Host and disk tiers (blake3 ids, which the disk tier verifies): demotions written
    /// outside the store, disk reads and disk-side comparisons of equal content.
    #[test]
    fn split_operations_keep_bytes_and_room_tiered(ops in proptest::collection::vec(op(), 1..150)) {
        run(ops, true)?;
    }
}

/// Takes the `i`-th (modulo) element out of `v`.
fn take<T>(v: &mut Vec<T>, i: u8) -> Option<T> {
    (!v.is_empty()).then(|| v.swap_remove(i as usize % v.len()))
}

fn run(ops: Vec<Op>, with_disk: bool) -> Result<(), TestCaseError> {
    let g = tiny_mla(RopeConvention::Interleaved);
    let block = ByteCount(HEADER_LEN as u64 + g.block_layout().payload_len);
    let cap = block.0.div_ceil(64) * 64 * 3;
    let dir = tempfile::tempdir().unwrap();
    let disk = with_disk.then(|| {
        let mut d = DiskConfig::new(dir.path(), ByteCount(64 * 4096));
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
    let mut store = Store::open_with(config, hasher, None).unwrap();
    let namespaces = [NamespaceKey::derive("a"), NamespaceKey::derive("b")];
    let contents: Vec<Vec<u8>> = (0..8).map(|i| payload(&g, i)).collect();

    let mut fillings: Vec<(Filling, usize)> = Vec::new();
    let mut comparisons: Vec<(Comparison, usize)> = Vec::new();
    let mut reads: Vec<(PinnedRead, usize)> = Vec::new();
    let mut demotions: Vec<Demotion> = Vec::new();
    // One entry per reference held, with the content it must read back as.
    let mut held: Vec<(SlotId, usize)> = Vec::new();

    for op in ops {
        match op {
            Op::BeginPut { content, ns } => {
                let Some(r) = store.try_reserve(&g).unwrap() else {
                    continue;
                };
                let c = content as usize;
                let mut f = r
                    .fill(&namespaces[ns as usize], &g, PutForm::Canonical)
                    .unwrap();
                let half = contents[c].len() / 2;
                f.write(&contents[c][..half]).unwrap();
                fillings.push((f, c));
            }
            Op::FinishPut(i) => {
                let Some((mut f, c)) = take(&mut fillings, i) else {
                    continue;
                };
                f.write(&contents[c][f.written() as usize..]).unwrap();
                let prepared = f.finish().unwrap();
                match store.seal_prepared(prepared).unwrap() {
                    SealStep::Sealed(s) => held.push((s.slot, c)),
                    SealStep::Compare(cmp) => comparisons.push((cmp, c)),
                }
            }
            Op::CancelPut(i) => {
                if let Some((f, _)) = take(&mut fillings, i) {
                    store.cancel(f.into_reservation()).unwrap();
                }
            }
            Op::Compare(i) => {
                if let Some((mut cmp, c)) = take(&mut comparisons, i) {
                    cmp.run();
                    held.push((store.seal_compared(cmp).unwrap().slot, c));
                }
            }
            Op::Read(i) => {
                if held.is_empty() {
                    continue;
                }
                let (slot, c) = held[i as usize % held.len()];
                match store.begin_read(slot).unwrap() {
                    ReadStep::Host(p) => reads.push((p, c)),
                    ReadStep::Disk(d) => {
                        let outcome = d.run();
                        let block = store.finish_disk_read(d, outcome).unwrap();
                        prop_assert_eq!(&block.bytes()[HEADER_LEN..], &contents[c][..]);
                    }
                    ReadStep::Gpu(_) | ReadStep::InPlace(_) => unreachable!("no GPU tier here"),
                }
            }
            Op::EndRead(i) => {
                if let Some((p, _)) = take(&mut reads, i) {
                    store.unpin_read(p).unwrap();
                }
            }
            Op::Room => {
                if let RoomStep::Demote(d) = store.room_step(Tier::Host, block).unwrap() {
                    demotions.push(*d);
                }
            }
            Op::Demote(i) => {
                if let Some(d) = take(&mut demotions, i) {
                    let outcome = d.run();
                    store.finish_demotion(d, outcome).unwrap();
                }
            }
            Op::Release(i) => {
                if let Some((slot, _)) = take(&mut held, i) {
                    store.release(slot).unwrap();
                }
            }
        }
        // Whatever happened, a pinned view still shows the block it pinned.
        for (p, c) in &reads {
            prop_assert_eq!(&p.bytes()[HEADER_LEN..], &contents[*c][..]);
        }
    }

    // End everything in flight.
    for (p, c) in reads.drain(..) {
        prop_assert_eq!(&p.bytes()[HEADER_LEN..], &contents[c][..]);
        store.unpin_read(p).unwrap();
    }
    for d in demotions.drain(..) {
        let outcome = d.run();
        store.finish_demotion(d, outcome).unwrap();
    }
    for (f, _) in fillings.drain(..) {
        store.cancel(f.into_reservation()).unwrap();
    }
    for (mut cmp, c) in comparisons.drain(..) {
        cmp.run();
        held.push((store.seal_compared(cmp).unwrap().slot, c));
    }
    // Every reference reads back as its content (dedup merged only equal bytes).
    for (slot, c) in &held {
        let (bytes, _) = match store.begin_read(*slot).unwrap() {
            ReadStep::Host(p) => {
                let b = p.bytes().to_vec();
                store.unpin_read(p).unwrap();
                (b, Tier::Host)
            }
            ReadStep::Disk(d) => {
                let outcome = d.run();
                let b = store.finish_disk_read(d, outcome).unwrap();
                (b.bytes().to_vec(), Tier::Disk)
            }
            ReadStep::Gpu(_) | ReadStep::InPlace(_) => unreachable!("no GPU tier here"),
        };
        prop_assert_eq!(&bytes[HEADER_LEN..], &contents[*c][..]);
    }
    for (slot, _) in held.drain(..) {
        store.release(slot).unwrap();
    }
    // Nothing holds room any more: the whole host tier can be made free.
    let all = ByteCount(cap);
    let mut freed = false;
    for _ in 0..1_000 {
        match store.room_step(Tier::Host, all).unwrap() {
            RoomStep::Fits => {
                freed = true;
                break;
            }
            RoomStep::Progress => {}
            RoomStep::Demote(d) => {
                let outcome = d.run();
                store.finish_demotion(*d, outcome).unwrap();
            }
            RoomStep::Full { transient } => {
                prop_assert!(
                    false,
                    "host room leaked (transient: {transient}): {:?}",
                    store.usage()
                );
            }
        }
    }
    prop_assert!(freed, "the host tier never came free: {:?}", store.usage());
    Ok(())
}
