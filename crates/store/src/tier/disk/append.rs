//! Disk work outside the store owner's lock: appends reserved in the active segment and written
//! by the caller ([`DiskAppend`]), and verified reads of a live entry ([`SegmentRead`]).
//!
//! An append is reserved under the lock ([`DiskTier::begin_append`]: room planned, sequence
//! number taken, the entry's bytes set aside at the end of the active segment), written
//! without it ([`DiskAppend::write`]: the payload first, then its header, so an entry whose
//! header is on disk was written whole unless power failed; checked against the id when
//! `verify_writes`; synced per policy) and then committed or aborted under the lock. Several
//! can be in flight: they complete in any order, so after a crash an entry before the last may
//! be missing its header (zeros, which recovery resyncs over, like any damaged header) or, on
//! power loss, be torn (which its verification on read quarantines). A segment with an append
//! in flight is neither deleted nor compacted.

use std::sync::Arc;

use super::segment::SegmentFile;
use super::{DiskTier, LiveEntry, ENTRY_HEADER_LEN};
use crate::error::StoreError;
use crate::handle::Handle;
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};

/// An append reserved in a segment, to be written outside the lock.
#[must_use = "a reserved append holds disk space; commit or abort it"]
#[derive(Debug)]
pub struct DiskAppend {
    seq: u64,
    entry: LiveEntry,
    file: Arc<SegmentFile>,
    verify: bool,
    sync: bool,
}

impl DiskAppend {
    /// Writes the block's bytes (`bytes`: header ‖ payload of the block, the entry's payload)
    /// at the reserved place, checks them against the id when the tier verifies writes, and
    /// syncs per policy.
    pub fn write(&self, bytes: &[u8]) -> Result<(), StoreError> {
        if bytes.len() as u64 != self.entry.len {
            return Err(StoreError::PayloadLength {
                expected: self.entry.len,
                found: bytes.len() as u64,
            });
        }
        let header = self.entry.header(self.seq).encode();
        let write = || {
            self.file
                .write_at(bytes, self.entry.offset + ENTRY_HEADER_LEN)?;
            self.file.write_at(&header, self.entry.offset)
        };
        let hash = || Blake3Ids.id(&self.entry.namespace, &[bytes]);
        let found = if self.verify {
            let (written, found) = std::thread::scope(|s| {
                let hashing = std::thread::Builder::new()
                    .name("kvfabric-disk-hash".into())
                    .spawn_scoped(s, hash);
                let written = write();
                let found = match hashing {
                    Ok(t) => t.join().ok(),
                    Err(_) => Some(hash()),
                };
                (written, found)
            });
            written?;
            found
        } else {
            write()?;
            None
        };
        match found {
            Some(found) if found != self.entry.id => {
                return Err(StoreError::HashMismatch {
                    id: self.entry.id,
                    found,
                })
            }
            None if self.verify => {
                return Err(StoreError::io(
                    "disk tier: verify write",
                    std::io::Error::other("hash thread panicked"),
                ))
            }
            _ => {}
        }
        if self.sync {
            self.file.sync()?;
        }
        Ok(())
    }
}

/// A live entry's payload, to read and hash outside the lock.
#[derive(Debug)]
pub struct SegmentRead {
    file: Arc<SegmentFile>,
    offset: u64,
    len: u64,
}

impl SegmentRead {
    /// The payload and the id it hashes to under `namespace`.
    pub(crate) fn run(&self, namespace: &NamespaceKey) -> Result<(Vec<u8>, BlockId), StoreError> {
        self.file.read_hashed(self.offset, self.len, namespace)
    }
}

impl DiskTier {
    /// Where the live entry behind `handle` (which must hold `id`) can be read.
    pub(crate) fn segment_read(
        &self,
        handle: &Handle,
        id: &BlockId,
    ) -> Result<SegmentRead, StoreError> {
        let e = self.lookup(handle)?;
        if e.id != *id {
            return Err(Self::invalid(format!(
                "handle holds block {}, asked for {id}",
                e.id
            )));
        }
        let seg = self.segments.get(&e.segment).ok_or_else(|| {
            Self::invalid(format!("segment {} of a live entry is missing", e.segment))
        })?;
        Ok(SegmentRead {
            file: Arc::clone(seg.file()),
            offset: e.offset + ENTRY_HEADER_LEN,
            len: e.len,
        })
    }

    /// Reserves an append of `len` payload bytes for block `id`, making room the way
    /// [`write`](crate::tier::TierBackend::write) does (dead segments deleted, a new segment
    /// started).
    pub fn begin_append(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
        len: u64,
    ) -> Result<DiskAppend, StoreError> {
        let plan = self.plan(len)?;
        self.execute(plan)?;
        let seq = self.take_seq();
        let entry_len = ENTRY_HEADER_LEN + len;
        let seg = self.active_segment()?;
        let offset = seg.reserve(entry_len);
        let (segment, file) = (seg.number, Arc::clone(seg.file()));
        self.disk_bytes += entry_len;
        self.pending_appends += 1;
        Ok(DiskAppend {
            seq,
            entry: LiveEntry {
                segment,
                offset,
                len,
                id: *id,
                namespace: *namespace,
            },
            file,
            verify: self.config.verify_writes,
            sync: self.sync_appends(),
        })
    }

    /// Makes a written append a live entry; returns its handle.
    pub fn commit_append(&mut self, a: DiskAppend) -> Handle {
        self.end_pending(&a, true);
        if let Some(seg) = self.segments.get_mut(&a.entry.segment) {
            seg.blocks.push(a.seq);
        }
        self.copies.entry(a.seq).or_default().push(a.entry.segment);
        self.insert_live(a.seq, a.entry);
        a.entry.handle(a.seq)
    }

    /// Gives up a reserved append (failed, or no longer wanted): cut off if nothing was
    /// reserved after it, otherwise left as garbage.
    pub fn abort_append(&mut self, a: DiskAppend) {
        self.end_pending(&a, false);
    }

    fn end_pending(&mut self, a: &DiskAppend, ok: bool) {
        self.pending_appends -= 1;
        let entry_len = a.entry.entry_bytes();
        if let Some(seg) = self.segments.get_mut(&a.entry.segment) {
            let before = seg.len;
            seg.end_reserved(a.entry.offset, entry_len, ok);
            self.disk_bytes -= before - seg.len;
        }
    }
}
