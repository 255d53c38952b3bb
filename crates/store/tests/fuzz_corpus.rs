//! Replays every committed fuzz input (the minimized corpora in `fuzz/corpus/<target>` and the
//! crashes kept in `fuzz/regressions/<target>`) through the properties the fuzz targets check
//! (`kvfabric_store::fuzzing`), on stable Rust. The ignored `write_seeds` test writes the
//! seed inputs the corpora grew from: real encodings made with the store's own encoders.

use std::path::{Path, PathBuf};

use kvfabric_store::block::BlockHeader;
use kvfabric_store::fuzzing;
use kvfabric_store::geometry::preset::builtin_presets;
use kvfabric_store::tier::disk::EntryHeader;
use kvfabric_store::{BlockId, NamespaceKey};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn replay(target: &str, run: fn(&[u8])) {
    fuzzing::replay(&fuzz_dir(), target, run);
}

#[test]
fn fuzz_corpus_block_header() {
    replay("block_header", fuzzing::block_header::run);
}

#[test]
fn fuzz_corpus_disk_entry() {
    replay("disk_entry", fuzzing::disk_entry::run);
}

#[test]
fn fuzz_corpus_disk_recover() {
    replay("disk_recover", fuzzing::disk_recover::run);
}

/// Seed programs for `disk_recover` (the byte layout is read by its `Builder`: segment count,
/// then per segment a number step, a header mode, an operation count and the operations, a
/// cut flag; then a leftover flag and the new block's bytes).
fn recover_seeds() -> Vec<(&'static str, Vec<u8>)> {
    const VALID: u8 = 3;
    const NO_CUT: u8 = 1;
    const NO_TEMP: u8 = 1;
    let block = |flags: u8, len: u16, fill: u8| {
        let mut b = vec![0, flags];
        b.extend_from_slice(&len.to_le_bytes());
        b.push(fill);
        b
    };
    let tombstone = |pick: u8| vec![9, pick];
    let seg = |ops: &[Vec<u8>]| {
        let mut b = vec![0, VALID, ops.len() as u8];
        b.extend(ops.concat());
        b.push(NO_CUT);
        b
    };
    let case = |segs: &[Vec<u8>], tail: &[u8]| {
        let mut b = vec![segs.len() as u8 - 1];
        b.extend(segs.concat());
        b.extend_from_slice(tail);
        b.extend_from_slice(b"the block written after recovery");
        b
    };
    let copy = |pick: u8| [block(4, 100, 1), vec![pick]].concat();
    vec![
        (
            "clean_two_segments",
            case(
                &[
                    seg(&[block(0, 100, 1), block(1, 0, 2), tombstone(1)]),
                    seg(&[copy(0), block(0, 4096, 3)]),
                ],
                &[NO_TEMP],
            ),
        ),
        (
            "large_block_then_bad_last",
            case(&[seg(&[vec![8, 0, 5], block(2, 700, 6)])], &[NO_TEMP]),
        ),
        (
            "garbage_then_resync",
            case(
                &[seg(&[
                    block(0, 50, 1),
                    vec![11, 16],
                    vec![0xAA; 16],
                    block(0, 60, 2),
                ])],
                &[NO_TEMP],
            ),
        ),
        (
            "torn_tail_and_leftover",
            case(
                &[seg(&[
                    block(0, 10, 1),
                    [vec![13], block(0, 900, 2), vec![200, 1]].concat(),
                ])],
                &[0, 7, 7, 7],
            ),
        ),
        (
            "cut_at_creation",
            case(&[vec![0, 0, 12], seg(&[block(0, 30, 9)])], &[NO_TEMP]),
        ),
    ]
}

#[test]
#[ignore = "writes seed inputs into fuzz/corpus (run once before fuzzing a new target)"]
fn write_seeds() {
    let mut seeds: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for g in builtin_presets() {
        let h = BlockHeader::for_geometry(&g).encode();
        seeds.push(("block_header", g.name.clone(), h.to_vec()));
    }
    let ns = NamespaceKey::derive("seed");
    let block = EntryHeader::block(7, BlockId([3; 32]), ns, 4_718_592);
    let tomb = EntryHeader::tombstone(8, 7, BlockId([3; 32]), ns);
    seeds.push(("disk_entry", "block".into(), block.encode().to_vec()));
    seeds.push(("disk_entry", "tombstone".into(), tomb.encode().to_vec()));
    for (name, bytes) in recover_seeds() {
        seeds.push(("disk_recover", name.into(), bytes));
    }
    for (target, name, bytes) in seeds {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create a corpus directory");
        std::fs::write(dir.join(format!("seed-{name}")), &bytes).expect("write a seed");
        // Each seed passes its target's properties.
        let run: fn(&[u8]) = match target {
            "block_header" => fuzzing::block_header::run,
            "disk_entry" => fuzzing::disk_entry::run,
            _ => fuzzing::disk_recover::run,
        };
        run(&bytes);
    }
}
