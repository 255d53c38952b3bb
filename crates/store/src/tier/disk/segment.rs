//! One segment file: its header, its name, positioned reads and appends, and the in-memory
//! bookkeeping of what it holds (live bytes, block copies, tombstones).
//!
//! A segment only grows by appending; it shrinks only when recovery truncates a torn tail or
//! a failed append is rolled back. Reads use `pread` (no shared cursor, no RAM mirror).

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StoreError;
use crate::hash_parallel::fill_and_hash;
use crate::id::{BlockId, NamespaceKey};
use crate::tier::disk::entry::checksum64;

/// First eight bytes of every segment file.
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"KVFSSEG1";
/// Segment format version written by this build.
pub(crate) const SEGMENT_VERSION: u16 = 1;
/// Bytes of the segment header; the first entry starts here.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 32;

/// `seg-00000001.kvs`.
pub(crate) fn segment_file_name(number: u32) -> String {
    format!("seg-{number:08}.kvs")
}

/// Where compaction writes a segment before renaming it into place.
pub(crate) fn temp_file_name(number: u32) -> String {
    format!("seg-{number:08}.tmp")
}

/// The segment number of a `seg-NNNNNNNN.kvs` name (`.tmp` with `temp`).
pub(crate) fn parse_file_name(name: &str, temp: bool) -> Option<u32> {
    let digits = name
        .strip_prefix("seg-")?
        .strip_suffix(if temp { ".tmp" } else { ".kvs" })?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Encodes a segment header (byte table in the [disk module docs](super)).
pub(crate) fn encode_segment_header(number: u32) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut b = [0u8; SEGMENT_HEADER_LEN as usize];
    b[0..8].copy_from_slice(&SEGMENT_MAGIC);
    b[8..10].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&number.to_le_bytes());
    let sum = checksum64(&b[..24]);
    b[24..32].copy_from_slice(&sum.to_le_bytes());
    b
}

/// Checks a segment header; `Err` says what was expected and what was found.
pub(crate) fn check_segment_header(b: &[u8], number: u32) -> Result<(), String> {
    if b.len() < SEGMENT_HEADER_LEN as usize {
        return Err(format!(
            "expected a {SEGMENT_HEADER_LEN} B header, found {} B",
            b.len()
        ));
    }
    let expected = encode_segment_header(number);
    if b[..SEGMENT_HEADER_LEN as usize] != expected {
        return Err(format!(
            "expected header {:02x?}, found {:02x?}",
            expected,
            &b[..SEGMENT_HEADER_LEN as usize]
        ));
    }
    Ok(())
}

/// A tombstone entry held by a segment (enough to re-encode it verbatim).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TombstoneRec {
    pub(crate) seq: u64,
    pub(crate) target: u64,
    pub(crate) id: BlockId,
    pub(crate) namespace: NamespaceKey,
}

/// An open segment file, shared (by `Arc`) with the reads and appends that run outside the
/// store owner's lock. A file whose segment was deleted stays readable through such a share
/// (its bytes never change once written), so a read that raced a deletion reads what was
/// there, and its verification decides.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    pub(crate) path: PathBuf,
    file: File,
}

/// An open segment file and what it holds.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) number: u32,
    pub(crate) path: PathBuf,
    file: Arc<SegmentFile>,
    /// Bytes in the file; the next append goes here.
    pub(crate) len: u64,
    /// Live block entries whose index copy is here.
    pub(crate) live_count: u64,
    /// Entry bytes (header + payload) of those.
    pub(crate) live_bytes: u64,
    /// Sequence numbers of every block entry stored here, live or not.
    pub(crate) blocks: Vec<u64>,
    /// Tombstones stored here.
    pub(crate) tombstones: Vec<TombstoneRec>,
    /// Appends reserved here and being written outside the lock ([`super::append`]): the
    /// segment is neither deleted nor compacted while any is.
    pub(crate) pending: u32,
}

fn io_at(what: &str, path: &Path, offset: u64, e: io::Error) -> StoreError {
    StoreError::io(
        format!("disk tier: {what} at offset {offset} of {}", path.display()),
        e,
    )
}

/// fsyncs a directory so that creations, renames and deletions in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("disk tier: fsync directory {}", dir.display()), e))
}

impl SegmentFile {
    pub(crate) fn write_at(&self, bytes: &[u8], offset: u64) -> Result<(), StoreError> {
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| io_at("write", &self.path, offset, e))
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), StoreError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| io_at("read", &self.path, offset, e))
    }

    /// `pread`s exactly `buf.len()` bytes at `offset` into memory that need not be initialised.
    /// Returns Ok only once every byte of `buf` has been written.
    pub(crate) fn read_uninit_at(
        &self,
        buf: &mut [MaybeUninit<u8>],
        offset: u64,
    ) -> Result<(), StoreError> {
        let fd = self.file.as_raw_fd();
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let at = offset + done as u64;
            // SAFETY: `rest` is valid for writes of `rest.len()` bytes; pread writes at most
            // that many and never reads the buffer.
            let n =
                unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at as libc::off_t) };
            match n {
                n if n > 0 => done += n as usize,
                0 => {
                    let e = io::Error::new(io::ErrorKind::UnexpectedEof, "segment ends early");
                    return Err(io_at("read", &self.path, at, e));
                }
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(io_at("read", &self.path, at, e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads `len` payload bytes at `offset`, hashing them under `namespace` piece by piece
    /// while each piece is hot in cache. Returns the bytes and the id they hash to.
    pub(crate) fn read_hashed(
        &self,
        offset: u64,
        len: u64,
        namespace: &NamespaceKey,
    ) -> Result<(Vec<u8>, BlockId), StoreError> {
        let n = usize::try_from(len).map_err(|_| {
            io_at(
                "read",
                &self.path,
                offset,
                io::Error::other("length exceeds usize"),
            )
        })?;
        let fill = |piece: &mut [MaybeUninit<u8>], at: usize| {
            self.read_uninit_at(piece, offset + at as u64)
        };
        // SAFETY: `read_uninit_at` writes every byte of the piece before returning Ok.
        unsafe { fill_and_hash(namespace, n, &fill) }
    }

    /// `fdatasync`.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        self.file
            .sync_data()
            .map_err(|e| StoreError::io(format!("disk tier: fsync {}", self.path.display()), e))
    }

    fn set_len(&self, len: u64) -> Result<(), StoreError> {
        self.file
            .set_len(len)
            .map_err(|e| io_at("truncate", &self.path, len, e))
    }
}

impl Segment {
    /// Creates `path` (which must not exist) holding only a segment header.
    pub(crate) fn create(path: PathBuf, number: u32, sync: bool) -> Result<Segment, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| StoreError::io(format!("disk tier: create {}", path.display()), e))?;
        let mut seg = Segment::from_file(number, path, file, 0);
        seg.file.write_at(&encode_segment_header(number), 0)?;
        seg.len = SEGMENT_HEADER_LEN;
        if sync {
            seg.sync()?;
        }
        Ok(seg)
    }

    /// Wraps an already open file of `len` bytes.
    pub(crate) fn from_file(number: u32, path: PathBuf, file: File, len: u64) -> Segment {
        Segment {
            number,
            file: Arc::new(SegmentFile {
                path: path.clone(),
                file,
            }),
            path,
            len,
            live_count: 0,
            live_bytes: 0,
            blocks: Vec::new(),
            tombstones: Vec::new(),
            pending: 0,
        }
    }

    /// The file, to share with work outside the lock.
    pub(crate) fn file(&self) -> &Arc<SegmentFile> {
        &self.file
    }

    /// Appends `header ‖ payload` and returns the entry's offset. On failure the file is cut
    /// back to where it was when nothing was reserved beyond it (otherwise the leftover is
    /// garbage that recovery resyncs over), so a failed append never leaves a torn entry that
    /// a later one is read through.
    pub(crate) fn append(
        &mut self,
        header: &[u8],
        payload: &[u8],
        sync: bool,
    ) -> Result<u64, StoreError> {
        let at = self.len;
        let entry = (header.len() + payload.len()) as u64;
        let res = self.file.write_at(header, at).and_then(|()| {
            self.file.write_at(payload, at + header.len() as u64)?;
            if sync {
                self.sync()?;
            }
            Ok(())
        });
        match res {
            Ok(()) => {
                self.len = at + entry;
                Ok(at)
            }
            Err(e) => {
                // Best effort. If the cut fails too, `len` still points here, so the next
                // append overwrites the leftover from its start; whatever it does not cover
                // lies past the last entry, where recovery treats it as a torn tail.
                let _ = self.file.set_len(at);
                Err(e)
            }
        }
    }

    /// Reserves `entry` bytes at the end for an append written outside the lock; returns the
    /// entry's offset.
    pub(crate) fn reserve(&mut self, entry: u64) -> u64 {
        let at = self.len;
        self.len += entry;
        self.pending += 1;
        at
    }

    /// Ends a reserved append. A failed one at the end of the file is cut off again; one with
    /// later entries behind it stays as garbage (zeros or a torn entry recovery resyncs over).
    pub(crate) fn end_reserved(&mut self, at: u64, entry: u64, ok: bool) {
        self.pending -= 1;
        if !ok && self.len == at + entry && self.set_len_quiet(at) {
            self.len = at;
        }
    }

    fn set_len_quiet(&self, len: u64) -> bool {
        self.file.set_len(len).is_ok()
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), StoreError> {
        self.file.read_at(buf, offset)
    }

    /// Cuts the file to `len` bytes (a torn tail, or a quarantined last entry).
    pub(crate) fn truncate(&mut self, len: u64) -> Result<(), StoreError> {
        self.file.set_len(len)?;
        self.len = len;
        Ok(())
    }

    /// Cuts the file to nothing and writes a fresh header (a creation torn by a crash).
    pub(crate) fn reset(&mut self) -> Result<(), StoreError> {
        self.truncate(0)?;
        self.file.write_at(&encode_segment_header(self.number), 0)?;
        self.len = SEGMENT_HEADER_LEN;
        Ok(())
    }

    /// `fdatasync`.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        self.file.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_segment_names_round_trip() {
        assert_eq!(segment_file_name(1), "seg-00000001.kvs");
        assert_eq!(parse_file_name("seg-00000001.kvs", false), Some(1));
        assert_eq!(
            parse_file_name(&segment_file_name(u32::MAX), false),
            Some(u32::MAX)
        );
        assert_eq!(parse_file_name(&temp_file_name(9), true), Some(9));
        assert_eq!(parse_file_name("seg-00000001.tmp", false), None);
        assert_eq!(parse_file_name("seg-+1.kvs", false), None);
        assert_eq!(parse_file_name("LOCK", false), None);
    }

    #[test]
    fn disk_segment_header_checks_number_and_bits() {
        let h = encode_segment_header(3);
        assert_eq!(check_segment_header(&h, 3), Ok(()));
        assert!(
            check_segment_header(&h, 4).is_err(),
            "a renamed segment is noticed"
        );
        let mut f = h;
        f[20] ^= 1;
        assert!(check_segment_header(&f, 3).is_err());
        assert!(check_segment_header(&h[..10], 3).is_err());
    }
}
