//! Disk tier throughput against a plain file holding the same bytes, measured in the same
//! run; prints ratios, asserts nothing about time. Run it optimised:
//!
//! ```text
//! cargo test --release -p kvfabric-store --test disk_throughput -- --ignored --nocapture
//! ```

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use kvfabric_store::tier::disk::{DiskConfig, DiskTier};
use kvfabric_store::{Blake3Ids, BlockId, ByteCount, IdHasher, NamespaceKey, TierBackend};

/// A DeepSeek-V3 bf16 block of 64 tokens.
const BLOCK_BYTES: usize = 4_718_592;
const BLOCKS: usize = 24;
const ROUNDS: usize = 5;

fn blocks() -> Vec<(BlockId, NamespaceKey, Vec<u8>)> {
    let ns = NamespaceKey::derive("bench");
    (0..BLOCKS as u64)
        .map(|i| {
            let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut b = Vec::with_capacity(BLOCK_BYTES);
            while b.len() < BLOCK_BYTES {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.extend_from_slice(&x.to_le_bytes());
            }
            b.truncate(BLOCK_BYTES);
            (Blake3Ids.id(&ns, &[&b]), ns, b)
        })
        .collect()
}

/// (write, read) time for the plain file: append with write_all, read back with pread.
fn plain(dir: &std::path::Path, data: &[(BlockId, NamespaceKey, Vec<u8>)]) -> (Duration, Duration) {
    let path = dir.join("plain.bin");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("open");
    let t = Instant::now();
    for (_, _, b) in data {
        f.write_all(b).expect("write");
    }
    let w = t.elapsed();
    let t = Instant::now();
    let mut total = 0usize;
    for (i, (_, _, b)) in data.iter().enumerate() {
        let mut buf = vec![0u8; b.len()];
        f.read_exact_at(&mut buf, (i * BLOCK_BYTES) as u64)
            .expect("read");
        total += buf[buf.len() / 2] as usize;
    }
    let r = t.elapsed();
    std::hint::black_box(total);
    std::fs::remove_file(path).expect("rm");
    (w, r)
}

/// (write, read) time through the disk tier (reads always verified).
fn tier(
    dir: &std::path::Path,
    data: &[(BlockId, NamespaceKey, Vec<u8>)],
    verify_writes: bool,
) -> (Duration, Duration) {
    let tdir = dir.join(format!("tier-{verify_writes}"));
    let mut cfg = DiskConfig::new(&tdir, ByteCount(1 << 30));
    cfg.verify_writes = verify_writes;
    let (mut t, _) = DiskTier::open(cfg).expect("open");
    let start = Instant::now();
    let hs: Vec<_> = data
        .iter()
        .map(|(id, ns, b)| t.write(id, ns, b).expect("write"))
        .collect();
    let w = start.elapsed();
    let start = Instant::now();
    let mut total = 0usize;
    for (h, (id, _, _)) in hs.iter().zip(data) {
        let buf = t.read(h, id).expect("read");
        total += buf[buf.len() / 2] as usize;
    }
    let r = start.elapsed();
    std::hint::black_box(total);
    drop(t);
    std::fs::remove_dir_all(tdir).expect("rm");
    (w, r)
}

fn gbps(d: Duration) -> f64 {
    (BLOCKS * BLOCK_BYTES) as f64 / d.as_secs_f64() / 1e9
}

#[test]
#[ignore = "throughput measurement; run with --release --ignored --nocapture"]
fn disk_throughput_vs_plain_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = blocks();
    let mut best: [(Duration, Duration); 3] = [(Duration::MAX, Duration::MAX); 3];
    for _ in 0..ROUNDS {
        let runs = [
            plain(dir.path(), &data),
            tier(dir.path(), &data, false),
            tier(dir.path(), &data, true),
        ];
        for (b, r) in best.iter_mut().zip(runs) {
            *b = (b.0.min(r.0), b.1.min(r.1));
        }
    }
    let [p, nv, v] = best;
    println!("{BLOCKS} blocks of {BLOCK_BYTES} B, best of {ROUNDS}, page cache (no fsync):");
    for (name, (w, r)) in [
        ("plain file", p),
        ("disk tier (verify_writes=false)", nv),
        ("disk tier (verify_writes=true)", v),
    ] {
        println!(
            "  {name:34} write {:6.2} GB/s  read {:6.2} GB/s  write+read {:7.1} ms  ratio {:.2}",
            gbps(w),
            gbps(r),
            (w + r).as_secs_f64() * 1e3,
            (p.0 + p.1).as_secs_f64() / (w + r).as_secs_f64()
        );
    }
}
