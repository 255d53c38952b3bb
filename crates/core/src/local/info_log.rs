//! [`InfoLog`]: what the node knows of its blocks for events ([`BlockInfo`]: token count,
//! engine identity), kept beside the store in `data_dir/block-info.log` so that a block
//! recovered from disk after a restart is published as it was before — same hashes, same
//! token ids, same `block_size`.
//!
//! An append-only file of records, each `magic "KVFI" ‖ body length u32 LE ‖ the first 8
//! bytes of blake3(body) ‖ body`, the body `namespace key (32) ‖ block id (32) ‖ the info as
//! JSON`, at most [`INFO_RECORD_BYTES_MAX`]. A later record of a block replaces an earlier
//! one. Reading stops at the first record that is torn, too long or fails its checksum (a
//! crash mid-append; everything before it is kept) and the file is rewritten on open with
//! only the blocks the store still holds, and again whenever it grows past [`COMPACT_FACTOR`]
//! times its size after the last rewrite (plus [`COMPACT_SLACK_BYTES`]).
//!
//! Appends are not synced: a record lost with the page cache (power loss, not a process
//! crash) only makes its block's events fall back to the id-derived hash and the header's
//! token count, never wrong.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use kvfabric_store::{BlockId, NamespaceKey};

use crate::events::BlockInfo;

/// The file in `data_dir`.
pub const INFO_LOG_FILE: &str = "block-info.log";
/// Largest record body.
pub const INFO_RECORD_BYTES_MAX: u32 = 64 * 1024;
/// Rewrite when the file is this many times the live records' size…
pub const COMPACT_FACTOR: u64 = 4;
/// …plus this much.
pub const COMPACT_SLACK_BYTES: u64 = 1 << 20;

const MAGIC: [u8; 4] = *b"KVFI";
const FRAME_LEN: usize = 4 + 4 + 8;

/// Records by block, as read.
pub(crate) type Infos = HashMap<(NamespaceKey, BlockId), BlockInfo>;

/// The open log.
pub(crate) struct InfoLog {
    path: PathBuf,
    file: File,
    /// Bytes in the file.
    bytes: u64,
    /// Bytes it had after the last rewrite (its live records then).
    base: u64,
}

fn record(ns: &NamespaceKey, id: &BlockId, info: &BlockInfo) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + 128);
    body.extend_from_slice(&ns.0);
    body.extend_from_slice(&id.0);
    serde_json::to_writer(&mut body, info).expect("a BlockInfo always encodes");
    let mut out = Vec::with_capacity(FRAME_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&blake3::hash(&body).as_bytes()[..8]);
    out.extend_from_slice(&body);
    out
}

/// Decodes the records of `bytes` up to the first bad one; the entries and the bytes used.
fn decode(bytes: &[u8]) -> (Infos, usize) {
    let mut out = HashMap::new();
    let mut at = 0usize;
    while bytes.len() - at >= FRAME_LEN {
        let f = &bytes[at..at + FRAME_LEN];
        let len = u32::from_le_bytes(f[4..8].try_into().expect("4 bytes"));
        if f[..4] != MAGIC || len > INFO_RECORD_BYTES_MAX || (len as usize) < 64 {
            break;
        }
        let Some(body) = bytes.get(at + FRAME_LEN..at + FRAME_LEN + len as usize) else {
            break;
        };
        if blake3::hash(body).as_bytes()[..8] != f[8..16] {
            break;
        }
        let ns = NamespaceKey(body[..32].try_into().expect("32 bytes"));
        let id = BlockId(body[32..64].try_into().expect("32 bytes"));
        let Ok(info) = serde_json::from_slice::<BlockInfo>(&body[64..]) else {
            break;
        };
        // A record that does not fit its own bounds is ignored, not trusted.
        if info.check().is_ok() {
            out.insert((ns, id), info);
        }
        at += FRAME_LEN + len as usize;
    }
    (out, at)
}

impl InfoLog {
    /// Opens (or creates) the log in `dir` and reads every intact record.
    pub(crate) fn open(dir: &Path) -> std::io::Result<(InfoLog, Infos)> {
        let path = dir.join(INFO_LOG_FILE);
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (entries, used) = decode(&bytes);
        if used < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                kept = used,
                cut = bytes.len() - used,
                "block-info log: a torn or damaged tail was cut"
            );
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let log = InfoLog {
            path,
            file,
            bytes: bytes.len() as u64,
            base: bytes.len() as u64,
        };
        Ok((log, entries))
    }

    /// Appends one record.
    pub(crate) fn append(
        &mut self,
        ns: &NamespaceKey,
        id: &BlockId,
        info: &BlockInfo,
    ) -> std::io::Result<()> {
        let r = record(ns, id, info);
        self.file.write_all(&r)?;
        self.bytes += r.len() as u64;
        Ok(())
    }

    /// Whether the file has grown past its bound over the live records of the last rewrite
    /// (so rewrites stay amortised: each follows appends of at least three times its size).
    pub(crate) fn wants_compaction(&self) -> bool {
        self.bytes > COMPACT_FACTOR * self.base + COMPACT_SLACK_BYTES
    }

    /// Rewrites the file with exactly `entries` (a temporary file renamed over it, synced).
    pub(crate) fn rewrite<'a>(
        &mut self,
        entries: impl Iterator<Item = (&'a NamespaceKey, &'a BlockId, &'a BlockInfo)>,
    ) -> std::io::Result<()> {
        let tmp = self.path.with_extension("log.tmp");
        let mut f = File::create(&tmp)?;
        let mut bytes = 0u64;
        let mut buf = Vec::new();
        for (ns, id, info) in entries {
            let r = record(ns, id, info);
            bytes += r.len() as u64;
            buf.extend_from_slice(&r);
            if buf.len() > 1 << 20 {
                f.write_all(&buf)?;
                buf.clear();
            }
        }
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.bytes = bytes;
        self.base = bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::events::{EngineBlock, EngineHash};

    fn info(n: u32) -> BlockInfo {
        BlockInfo {
            block_tokens: 64,
            engine: n.is_multiple_of(2).then(|| {
                Arc::new(EngineBlock {
                    engine: "vllm/0.33.0".into(),
                    page_hashes: vec![EngineHash::Int(u64::from(n))],
                    parent: None,
                    page_tokens: 64,
                    token_ids: (0..64).map(|t| t + n).collect(),
                    lora_id: None,
                    lora_name: None,
                    group_idx: None,
                    kv_cache_spec_kind: None,
                })
            }),
        }
    }

    #[test]
    fn records_survive_reopening_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let ns = NamespaceKey::derive("a");
        {
            let (mut log, found) = InfoLog::open(dir.path()).unwrap();
            assert!(found.is_empty());
            for n in 0..5u8 {
                log.append(&ns, &BlockId([n; 32]), &info(u32::from(n)))
                    .unwrap();
            }
            // A later record of block 1 replaces the earlier one.
            log.append(&ns, &BlockId([1; 32]), &info(8)).unwrap();
        }
        let path = dir.path().join(INFO_LOG_FILE);
        let whole = std::fs::read(&path).unwrap();
        let (_, found) = InfoLog::open(dir.path()).unwrap();
        assert_eq!(found.len(), 5);
        assert_eq!(found[&(ns, BlockId([1; 32]))], info(8));
        assert_eq!(found[&(ns, BlockId([4; 32]))], info(4));

        // Cut the last record in half and flip a byte in the third: the first two remain.
        let mut torn = whole.clone();
        torn.truncate(whole.len() - 10);
        std::fs::write(&path, &torn).unwrap();
        let (_, found) = InfoLog::open(dir.path()).unwrap();
        assert_eq!(found.len(), 5);
        assert_eq!(
            found[&(ns, BlockId([1; 32]))],
            info(1),
            "the torn replacement is cut, the earlier record stands"
        );
        let second_end = {
            let (_, used) = decode(&whole[..]);
            assert_eq!(used, whole.len());
            let r0 = record(&ns, &BlockId([0; 32]), &info(0)).len();
            let r1 = record(&ns, &BlockId([1; 32]), &info(1)).len();
            r0 + r1
        };
        let mut flipped = whole;
        flipped[second_end + FRAME_LEN + 40] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        let (mut log, found) = InfoLog::open(dir.path()).unwrap();
        assert_eq!(found.len(), 2);

        // A rewrite keeps exactly what it is given.
        let keep = info(2);
        log.rewrite([(&ns, &BlockId([2; 32]), &keep)].into_iter())
            .unwrap();
        let (_, found) = InfoLog::open(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[&(ns, BlockId([2; 32]))], keep);
    }

    #[test]
    fn the_file_is_rewritten_only_after_it_grew_past_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let ns = NamespaceKey::derive("a");
        let (mut log, _) = InfoLog::open(dir.path()).unwrap();
        let id = |n: u64| {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&n.to_le_bytes());
            BlockId(b)
        };
        let mut n = 0u64;
        while !log.wants_compaction() {
            log.append(&ns, &id(n), &info(0)).unwrap();
            n += 1;
            assert!(n < 1_000_000);
        }
        let one = record(&ns, &id(0), &info(0)).len() as u64;
        assert!(n * one > COMPACT_SLACK_BYTES, "{n} records of {one} bytes");
        let keep: Vec<(NamespaceKey, BlockId, BlockInfo)> =
            (0..10).map(|i| (ns, id(i), info(0))).collect();
        log.rewrite(keep.iter().map(|(a, b, c)| (a, b, c))).unwrap();
        assert!(!log.wants_compaction());
        assert_eq!(InfoLog::open(dir.path()).unwrap().1.len(), 10);
    }
}
