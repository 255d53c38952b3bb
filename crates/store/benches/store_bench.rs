//! Store benchmarks, each against a baseline measured in the same run.
//!
//! `cargo bench -p kvfabric-store --bench store_bench`
//!
//! - seal: 64-token DeepSeek-V3 BF16 blocks (4,497,408 B) sealed into the host tier, against
//!   plain `blake3::hash` of the same bytes. Two paths: in place (the payload was received
//!   into a reservation in the arena, as the node's put path does; prints
//!   `ratio seal_over_blake3 <v>`) and from a caller's buffer (copied in while hashing;
//!   prints `ratio seal_from_buffer_over_blake3 <v>`).
//! - disk: the disk tier writing then reading back (verified) the same blocks, against plain
//!   file `write_all` then `read_exact_at` of the same bytes. Prints `ratio disk_over_file <v>`.
//!
//! Rounds alternate baseline and subject; each figure is the median round.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::tier::disk::{DiskConfig, DiskTier};
use kvfabric_store::{
    Blake3Ids, BlockHeader, ByteCount, IdHasher, NamespaceKey, PutForm, Store, StoreConfig,
    TierBackend,
};

const BLOCKS: usize = 24;
const ROUNDS: usize = 7;

fn blocks(len: usize) -> Vec<Vec<u8>> {
    (0..BLOCKS as u64)
        .map(|seed| {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut v = vec![0u8; len];
            for w in v.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                w.copy_from_slice(&x.to_le_bytes());
            }
            v
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn main() {
    let g = builtin_preset("deepseek-v3").expect("embedded preset deepseek-v3");
    let payload_len = g.block_layout().payload_len as usize;
    let data = blocks(payload_len);
    let total = BLOCKS * payload_len;
    println!("blocks: {BLOCKS} x {payload_len} B (deepseek-v3, bf16, 64 tokens), {ROUNDS} rounds");

    // --- seal vs blake3 -------------------------------------------------------------------
    let ns = NamespaceKey::derive("bench");
    let cap = ByteCount(((BLOCKS + 2) * (payload_len + 4096)) as u64);
    let mut store = Store::open(StoreConfig::host_only(cap)).expect("store");
    let seal_round = |store: &mut Store| {
        let t = Instant::now();
        let sealed: Vec<_> = data
            .iter()
            .map(|p| {
                store
                    .seal(&ns, &g, 64, p, PutForm::Canonical)
                    .expect("seal")
            })
            .collect();
        let d = t.elapsed();
        for s in sealed {
            store.release(s.slot).expect("release");
            assert!(store.remove_if_unused(s.slot).expect("remove"));
        }
        d
    };
    // In place: the payload is received straight into a reservation (what the node's put path
    // does); only the seal is timed.
    let in_place_round = |store: &mut Store| {
        let mut elapsed = Duration::ZERO;
        let mut sealed = Vec::with_capacity(BLOCKS);
        for p in &data {
            let r = store.reserve(&g).expect("reserve");
            store
                .reservation_payload(&r)
                .expect("payload")
                .copy_from_slice(p);
            let t = Instant::now();
            sealed.push(
                store
                    .seal_reserved(r, &ns, &g, PutForm::Canonical)
                    .expect("seal"),
            );
            elapsed += t.elapsed();
        }
        for s in sealed {
            store.release(s.slot).expect("release");
            assert!(store.remove_if_unused(s.slot).expect("remove"));
        }
        elapsed
    };
    seal_round(&mut store); // touch the arena's pages once
    let (mut copy, mut in_place, mut hash) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for p in &data {
            std::hint::black_box(blake3::hash(p));
        }
        hash.push(t.elapsed());
        in_place.push(in_place_round(&mut store));
        copy.push(seal_round(&mut store));
    }
    let copy = gbps(total, median(copy));
    let in_place = gbps(total, median(in_place));
    let hash = gbps(total, median(hash));
    println!("seal in place    {in_place:>7.3} GB/s (payload received into the arena)");
    println!("seal from buffer {copy:>7.3} GB/s (copied in from the caller, hashed per chunk)");
    println!("blake3           {hash:>7.3} GB/s (baseline)");
    println!("ratio seal_from_buffer_over_blake3 {:.3}", copy / hash);

    // --- disk tier vs plain file -----------------------------------------------------------
    let dir = tempfile::tempdir().expect("tempdir");
    let header = BlockHeader::for_geometry(&g).encode();
    let full: Vec<Vec<u8>> = data.iter().map(|p| [&header[..], p].concat()).collect();
    let ids: Vec<_> = full.iter().map(|b| Blake3Ids.id(&ns, &[b])).collect();
    let mut disk = Vec::new();
    let mut file = Vec::new();
    for round in 0..ROUNDS {
        let path = dir.path().join(format!("plain-{round}"));
        let t = Instant::now();
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create");
        let mut offsets = Vec::with_capacity(BLOCKS);
        let mut at = 0u64;
        for b in &full {
            f.write_all(b).expect("write");
            offsets.push(at);
            at += b.len() as u64;
        }
        let mut buf = vec![0u8; full[0].len()];
        for (b, off) in full.iter().zip(&offsets) {
            f.read_exact_at(&mut buf[..b.len()], *off).expect("read");
            std::hint::black_box(&buf);
        }
        file.push(t.elapsed());
        drop(f);
        std::fs::remove_file(&path).expect("remove");

        let tier_dir = dir.path().join(format!("tier-{round}"));
        let config = DiskConfig::new(&tier_dir, ByteCount((total as u64) * 2 + (64 << 20)));
        let t = Instant::now();
        let (mut tier, _) = DiskTier::open(config).expect("open disk tier");
        let handles: Vec<_> = full
            .iter()
            .zip(&ids)
            .map(|(b, id)| tier.write(id, &ns, b).expect("disk write"))
            .collect();
        for (h, id) in handles.iter().zip(&ids) {
            std::hint::black_box(tier.read(h, id).expect("disk read"));
        }
        disk.push(t.elapsed());
        drop(tier);
        std::fs::remove_dir_all(&tier_dir).expect("remove tier dir");
    }
    let (disk, file) = (gbps(2 * total, median(disk)), gbps(2 * total, median(file)));
    println!("disk             {disk:>7.3} GB/s (write then verified read)");
    println!("file             {file:>7.3} GB/s (baseline: write_all then read_exact_at)");
    println!("ratio seal_over_blake3 {:.3}", in_place / hash);
    println!("ratio disk_over_file {:.3}", disk / file);
}
