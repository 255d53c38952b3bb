//! Store benchmarks (`bench` feature), each against a baseline measured in the same run. One
//! body behind both `cargo bench -p kvfabric-store --bench store_bench` and
//! `kvfabric bench store [--blocks N] [--rounds R]`.
//!
//! - seal: 64-token DeepSeek-V3 BF16 blocks (4,497,408 B) sealed into the host tier, against
//!   plain `blake3::hash` of the same bytes. Two paths: in place (the payload was received
//!   into a reservation in the arena, as the node's put path does; prints
//!   `ratio seal_over_blake3 <v>`) and from a caller's buffer (copied in while hashing;
//!   prints `ratio seal_from_buffer_over_blake3 <v>`).
//! - disk: the disk tier writing then reading back (verified) the same blocks, against plain
//!   file `write_all` then `read_exact_at` of the same bytes. Prints `ratio disk_over_file <v>`.
//!
//! Rounds alternate baseline and subject; each figure is the median round. Results go to
//! standard output, a bar of the rounds to standard error on a terminal (`kvfabric-progress`); a failing store call is an error, not a panic.
//! [`run`] also returns the printed figures ([`StoreBenchFigures`]), for a caller that draws
//! them.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use anyhow::Context;
use kvfabric_progress::{Progress, Unit};

use crate::geometry::preset::builtin_preset;
use crate::tier::disk::{DiskConfig, DiskTier};
use crate::{
    Blake3Ids, BlockHeader, ByteCount, IdHasher, NamespaceKey, PutForm, Store, StoreConfig,
    TierBackend,
};

/// What one run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreBenchOptions {
    /// Distinct blocks sealed (and written to disk) per round.
    pub blocks: usize,
    /// Rounds of each side; each figure is the median round.
    pub rounds: usize,
}

impl Default for StoreBenchOptions {
    /// 24 blocks, 7 rounds: the figures the README reports.
    fn default() -> Self {
        StoreBenchOptions {
            blocks: 24,
            rounds: 7,
        }
    }
}

/// The figures [`run`] printed, each the median round, in GB/s of payload bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreBenchFigures {
    /// Sealing in place (the payload received into the arena).
    pub seal_in_place_gbps: f64,
    /// Sealing from a caller's buffer (copied in while hashing).
    pub seal_from_buffer_gbps: f64,
    /// Plain `blake3::hash` of the same bytes: the seals' baseline.
    pub blake3_gbps: f64,
    /// The disk tier writing then reading back (verified).
    pub disk_gbps: f64,
    /// Plain file `write_all` then `read_exact_at`: the disk tier's baseline.
    pub file_gbps: f64,
}

/// `blocks` deterministic pseudo-random payloads of `len` bytes.
fn blocks(count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count as u64)
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

/// The median of `v` (the upper one for an even count).
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// `bytes` over `d` in GB/s.
fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// Runs both benchmarks, prints their figures and ratio lines, and returns the figures.
pub fn run(opts: &StoreBenchOptions) -> anyhow::Result<StoreBenchFigures> {
    anyhow::ensure!(opts.blocks > 0, "--blocks: expected at least 1, found 0");
    anyhow::ensure!(opts.rounds > 0, "--rounds: expected at least 1, found 0");
    let (count, rounds) = (opts.blocks, opts.rounds);
    let g = builtin_preset("deepseek-v3").context("embedded preset deepseek-v3")?;
    let payload_len = g.block_layout().payload_len as usize;
    let data = blocks(count, payload_len);
    let total = count * payload_len;
    println!("blocks: {count} x {payload_len} B (deepseek-v3, bf16, 64 tokens), {rounds} rounds");

    // --- seal vs blake3 -------------------------------------------------------------------
    let ns = NamespaceKey::derive("bench");
    let cap = ByteCount(((count + 2) * (payload_len + 4096)) as u64);
    let mut store = Store::open(StoreConfig::host_only(cap)).context("opening the store")?;
    let seal_round = |store: &mut Store| -> anyhow::Result<Duration> {
        let t = Instant::now();
        let sealed = data
            .iter()
            .map(|p| store.seal(&ns, &g, 64, p, PutForm::Canonical))
            .collect::<Result<Vec<_>, _>>()
            .context("seal")?;
        let d = t.elapsed();
        for s in sealed {
            store.release(s.slot).context("release")?;
            anyhow::ensure!(
                store.remove_if_unused(s.slot).context("remove")?,
                "a released block is still in use"
            );
        }
        Ok(d)
    };
    // In place: the payload is received straight into a reservation (what the node's put path
    // does); only the seal is timed.
    let in_place_round = |store: &mut Store| -> anyhow::Result<Duration> {
        let mut elapsed = Duration::ZERO;
        let mut sealed = Vec::with_capacity(count);
        for p in &data {
            let mut r = store.reserve(&g).context("reserve")?;
            r.payload_mut().copy_from_slice(p);
            let t = Instant::now();
            sealed.push(
                store
                    .seal_reserved(r, &ns, &g, PutForm::Canonical)
                    .context("seal")?,
            );
            elapsed += t.elapsed();
        }
        for s in sealed {
            store.release(s.slot).context("release")?;
            anyhow::ensure!(
                store.remove_if_unused(s.slot).context("remove")?,
                "a released block is still in use"
            );
        }
        Ok(elapsed)
    };
    let bar = Progress::new("bench store seal", rounds as u64, Unit::Items("rounds"));
    bar.message("blake3, seal in place, seal from buffer");
    seal_round(&mut store)?; // touch the arena's pages once
    let (mut copy, mut in_place, mut hash) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for p in &data {
            std::hint::black_box(blake3::hash(p));
        }
        hash.push(t.elapsed());
        in_place.push(in_place_round(&mut store)?);
        copy.push(seal_round(&mut store)?);
        bar.inc(1);
    }
    bar.finish();
    let copy = gbps(total, median(copy));
    let in_place = gbps(total, median(in_place));
    let hash = gbps(total, median(hash));
    println!("seal in place    {in_place:>7.3} GB/s (payload received into the arena)");
    println!("seal from buffer {copy:>7.3} GB/s (copied in from the caller, hashed per chunk)");
    println!("blake3           {hash:>7.3} GB/s (baseline)");
    println!("ratio seal_from_buffer_over_blake3 {:.3}", copy / hash);

    // --- disk tier vs plain file -----------------------------------------------------------
    let dir = tempfile::tempdir().context("temporary directory")?;
    let header = BlockHeader::for_geometry(&g).encode();
    let full: Vec<Vec<u8>> = data.iter().map(|p| [&header[..], p].concat()).collect();
    let ids: Vec<_> = full.iter().map(|b| Blake3Ids.id(&ns, &[b])).collect();
    let mut disk = Vec::new();
    let mut file = Vec::new();
    let bar = Progress::new("bench store disk", rounds as u64, Unit::Items("rounds"));
    bar.message("plain file, disk tier");
    for round in 0..rounds {
        let path = dir.path().join(format!("plain-{round}"));
        let t = Instant::now();
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        let mut offsets = Vec::with_capacity(count);
        let mut at = 0u64;
        for b in &full {
            f.write_all(b).context("write")?;
            offsets.push(at);
            at += b.len() as u64;
        }
        let mut buf = vec![0u8; full[0].len()];
        for (b, off) in full.iter().zip(&offsets) {
            f.read_exact_at(&mut buf[..b.len()], *off).context("read")?;
            std::hint::black_box(&buf);
        }
        file.push(t.elapsed());
        drop(f);
        std::fs::remove_file(&path).context("remove")?;

        let tier_dir = dir.path().join(format!("tier-{round}"));
        let config = DiskConfig::new(&tier_dir, ByteCount((total as u64) * 2 + (64 << 20)));
        let t = Instant::now();
        let (mut tier, _) = DiskTier::open(config).context("opening the disk tier")?;
        let handles = full
            .iter()
            .zip(&ids)
            .map(|(b, id)| tier.write(id, &ns, b))
            .collect::<Result<Vec<_>, _>>()
            .context("disk write")?;
        for (h, id) in handles.iter().zip(&ids) {
            std::hint::black_box(tier.read(h, id).context("disk read")?);
        }
        disk.push(t.elapsed());
        drop(tier);
        std::fs::remove_dir_all(&tier_dir).context("remove tier dir")?;
        bar.inc(1);
    }
    bar.finish();
    let (disk, file) = (gbps(2 * total, median(disk)), gbps(2 * total, median(file)));
    println!("disk             {disk:>7.3} GB/s (write then verified read)");
    println!("file             {file:>7.3} GB/s (baseline: write_all then read_exact_at)");
    println!("ratio seal_over_blake3 {:.3}", in_place / hash);
    println!("ratio disk_over_file {:.3}", disk / file);
    Ok(StoreBenchFigures {
        seal_in_place_gbps: in_place,
        seal_from_buffer_gbps: copy,
        blake3_gbps: hash,
        disk_gbps: disk,
        file_gbps: file,
    })
}
