//! The conformance suite every [`TierBackend`] runs (host, disk, GPU).
//!
//! Call [`run`] from a test with a constructor of fresh, empty tiers of at least 1 MiB
//! capacity. It panics with a message naming the broken property.

use crate::error::StoreError;
use crate::handle::Handle;
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// A deterministic block of `len` bytes in one of two namespaces (by seed parity), with its id.
pub fn block(seed: u64, len: usize) -> (BlockId, NamespaceKey, Vec<u8>) {
    let ns = NamespaceKey::derive(if seed.is_multiple_of(2) {
        "tenant-a"
    } else {
        "tenant-b"
    });
    let mut bytes = vec![0u8; len];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in bytes.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    (Blake3Ids.id(&ns, &[&bytes]), ns, bytes)
}

/// Runs every property against fresh tiers from `make`.
pub fn run<T: TierBackend>(make: &mut dyn FnMut() -> T) {
    round_trip(&mut make());
    free_invalidates(&mut make());
    fill_never_exceeds_capacity(&mut make());
    no_aliasing(&mut make());
    foreign_handle_refused(&mut make());
}

fn round_trip<T: TierBackend>(t: &mut T) {
    let (id, ns, bytes) = block(1, 4096 + 17);
    let before = t.used();
    let h = t.write(&id, &ns, &bytes).expect("write into an empty tier");
    assert_eq!(h.tier, t.tier(), "handle names its tier");
    assert_eq!(
        h.len,
        ByteCount(bytes.len() as u64),
        "handle length is the block length"
    );
    assert!(
        t.used().0 >= before.0 + bytes.len() as u64,
        "used grows by at least the length"
    );
    assert_eq!(
        t.read(&h, &id).expect("read back"),
        bytes,
        "bytes round-trip"
    );
    assert_eq!(
        t.read(&h, &id).expect("read twice"),
        bytes,
        "reads do not consume"
    );
}

fn free_invalidates<T: TierBackend>(t: &mut T) {
    let (id, ns, bytes) = block(2, 1000);
    let h = t.write(&id, &ns, &bytes).expect("write");
    let used = t.used();
    t.free(&h).expect("free");
    assert!(t.used() < used, "free releases bytes");
    assert!(
        matches!(t.read(&h, &id), Err(StoreError::InvalidHandle { .. })),
        "a freed handle cannot be read"
    );
    assert!(t.free(&h).is_err(), "double free is refused");
}

fn fill_never_exceeds_capacity<T: TierBackend>(t: &mut T) {
    let cap = t.capacity();
    let mut handles = Vec::new();
    for seed in 0..10_000u64 {
        let (id, ns, bytes) = block(100 + seed, 64 * 1024 + 3);
        if !t.can_fit(ByteCount(bytes.len() as u64)) {
            let err = t
                .write(&id, &ns, &bytes)
                .expect_err("write when can_fit is false");
            assert!(
                matches!(err, StoreError::Full { .. } | StoreError::TooLarge { .. }),
                "a full tier says Full, got {err}"
            );
            break;
        }
        handles.push((
            t.write(&id, &ns, &bytes).expect("can_fit promised room"),
            id,
            bytes,
        ));
        assert!(
            t.used() <= cap,
            "used {} exceeds capacity {}",
            t.used(),
            cap
        );
    }
    assert!(
        !handles.is_empty(),
        "a 1 MiB tier holds at least one 64 KiB block"
    );
    for (h, id, bytes) in &handles {
        assert_eq!(
            &t.read(h, id).expect("read after fill"),
            bytes,
            "fill kept every block"
        );
    }
    for (h, _, _) in &handles {
        t.free(h).expect("free after fill");
    }
    let (id, ns, bytes) = block(99, 64 * 1024 + 3);
    let h = t
        .write(&id, &ns, &bytes)
        .expect("room again after freeing everything");
    assert_eq!(t.read(&h, &id).expect("read"), bytes);
}

fn no_aliasing<T: TierBackend>(t: &mut T) {
    let mut live: Vec<(Handle, BlockId, Vec<u8>)> = Vec::new();
    for seed in 0..64u64 {
        let (id, ns, bytes) = block(1000 + seed, 1 + (seed as usize * 997) % 20_000);
        let h = match t.write(&id, &ns, &bytes) {
            Ok(h) => h,
            Err(StoreError::Full { .. }) => break,
            Err(e) => panic!("write: {e}"),
        };
        for (other, _, _) in &live {
            assert!(!h.overlaps(other), "{h:?} overlaps {other:?}");
        }
        live.push((h, id, bytes));
        if seed % 3 == 0 {
            let (h, _, _) = live.remove(live.len() / 2);
            t.free(&h).expect("free");
        }
    }
    for (h, id, bytes) in &live {
        assert_eq!(
            &t.read(h, id).expect("read"),
            bytes,
            "no write clobbered another block"
        );
    }
}

fn foreign_handle_refused<T: TierBackend>(t: &mut T) {
    let (id, ns, bytes) = block(7, 512);
    let h = t.write(&id, &ns, &bytes).expect("write");
    let mut forged = h;
    forged.generation = h.generation.wrapping_add(1_000_000);
    assert!(
        t.read(&forged, &id).is_err(),
        "a handle with a wrong generation is refused"
    );
    let mut other = h;
    other.tier = match h.tier {
        crate::handle::Tier::Host => crate::handle::Tier::Disk,
        _ => crate::handle::Tier::Host,
    };
    assert!(
        t.read(&other, &id).is_err(),
        "a handle of another tier is refused"
    );
}
