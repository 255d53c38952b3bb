//! One WAL record on disk: `len ‖ sum ‖ kind ‖ body`, and what each kind carries.
//!
//! | field | bytes | meaning                                                            |
//! |-------|-------|--------------------------------------------------------------------|
//! | len   | 4, LE | bytes of `kind ‖ body`; 0 never starts a record (zeroed space ends a segment) |
//! | sum   | 8     | the first 8 bytes of blake3(`len ‖ kind ‖ body`)                     |
//! | kind  | 1     | [`Kind`]                                                           |
//! | body  | len-1 | the kind's payload, in the store's record format (`version ‖ bincode`) |
//!
//! A record whose checksum does not match, or that runs past the end of the file, is where
//! the log ends (a write torn by a crash); the segment scanner decides whether that is a torn
//! tail (last segment) or corruption (any other).

use crate::storage::records::{decode, encode_into};
use crate::type_config::{Entry, LogId};

use super::Checkpoint;
use crate::ids::NodeId;

/// Bytes in front of a record's kind and body.
pub(super) const HEADER_LEN: usize = 12;
/// No record may be longer than this (a full entry is far smaller; see
/// `DirectoryConfig::entry_bytes_max`).
pub(super) const RECORD_BYTES_MAX: usize = 256 << 20;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    /// A log entry (the body is the encoded `Entry`).
    Entry = 1,
    /// The latest vote.
    Vote = 2,
    /// The latest committed log id (a hint for openraft; see `log_store`).
    Committed = 3,
    /// Every entry at or above the index is gone.
    Truncate = 4,
    /// Every entry at or below the log id is gone, and it is the purge point.
    Purge = 5,
    /// Vote, committed id and purge point as they stood when the segment began.
    Checkpoint = 6,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Entry,
            2 => Kind::Vote,
            3 => Kind::Committed,
            4 => Kind::Truncate,
            5 => Kind::Purge,
            6 => Kind::Checkpoint,
            _ => return None,
        })
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::storage) enum Record {
    Entry(Box<Entry>),
    Vote(openraft::Vote<NodeId>),
    Committed(Option<LogId>),
    Truncate(u64),
    Purge(LogId),
    Checkpoint(Checkpoint),
}

impl Record {
    fn kind(&self) -> Kind {
        match self {
            Record::Entry(_) => Kind::Entry,
            Record::Vote(_) => Kind::Vote,
            Record::Committed(_) => Kind::Committed,
            Record::Truncate(_) => Kind::Truncate,
            Record::Purge(_) => Kind::Purge,
            Record::Checkpoint(_) => Kind::Checkpoint,
        }
    }

    /// Appends the framed record to `out`.
    pub(super) fn write_to(&self, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            Record::Entry(e) => write_entry(e, out),
            Record::Vote(v) => frame(self.kind(), out, |o| encode_into(v, o)),
            Record::Committed(c) => frame(self.kind(), out, |o| encode_into(c, o)),
            Record::Truncate(from) => frame(self.kind(), out, |o| encode_into(from, o)),
            Record::Purge(upto) => frame(self.kind(), out, |o| encode_into(upto, o)),
            Record::Checkpoint(c) => frame(self.kind(), out, |o| encode_into(c, o)),
        }
    }
}

/// Appends `entry`'s framed record to `out`.
pub(super) fn write_entry(entry: &Entry, out: &mut Vec<u8>) -> Result<(), String> {
    frame(Kind::Entry, out, |o| encode_into(entry, o))
}

/// Appends a record of `kind` to `out`, its body written in place by `body`, then fills in
/// the length and checksum in front of it (no copy of the body).
fn frame(
    kind: Kind,
    out: &mut Vec<u8>,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    out.push(kind as u8);
    if let Err(e) = body(out) {
        out.truncate(start);
        return Err(e);
    }
    let len = out.len() - start - HEADER_LEN;
    if len > RECORD_BYTES_MAX {
        out.truncate(start);
        return Err(format!(
            "a WAL record of at most {RECORD_BYTES_MAX} bytes expected, found {len}"
        ));
    }
    let len = (len as u32).to_le_bytes();
    let sum = checksum(&len, &out[start + HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&len);
    out[start + 4..start + HEADER_LEN].copy_from_slice(&sum);
    Ok(())
}

/// The first 8 bytes of blake3(`len ‖ kind ‖ body`).
pub(super) fn checksum(len: &[u8; 4], kind_and_body: &[u8]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(len);
    h.update(kind_and_body);
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    out
}

/// What [`parse`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parsed<'a> {
    /// A whole, intact record of `total` bytes (header included).
    Record {
        kind: Kind,
        body: &'a [u8],
        total: usize,
    },
    /// Zeroed space (or nothing at all): the clean end of what was written.
    End,
    /// A record that does not check out: torn by a crash, or corrupt.
    Bad(String),
}

/// Parses the record at the start of `buf`.
pub(super) fn parse(buf: &[u8]) -> Parsed<'_> {
    if buf.len() < 4 || buf[..4] == [0; 4] {
        return Parsed::End;
    }
    let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > RECORD_BYTES_MAX {
        return Parsed::Bad(format!(
            "a record of at most {RECORD_BYTES_MAX} bytes expected, found a length of {len}"
        ));
    }
    let total = HEADER_LEN + len;
    if buf.len() < total {
        return Parsed::Bad(format!(
            "a record of {total} bytes expected, found {} before the end of the file",
            buf.len()
        ));
    }
    let (kind, body) = (buf[HEADER_LEN], &buf[HEADER_LEN + 1..total]);
    let len_bytes: [u8; 4] = buf[..4].try_into().expect("4 bytes");
    if checksum(&len_bytes, &buf[HEADER_LEN..total]) != buf[4..HEADER_LEN] {
        return Parsed::Bad("checksum mismatch".into());
    }
    match Kind::from_u8(kind) {
        Some(kind) => Parsed::Record { kind, body, total },
        None => Parsed::Bad(format!("a record kind 1..=6 expected, found {kind}")),
    }
}

/// Decodes a parsed record's body.
pub(super) fn decode_record(kind: Kind, body: &[u8]) -> Result<Record, String> {
    Ok(match kind {
        Kind::Entry => Record::Entry(Box::new(decode(body)?)),
        Kind::Vote => Record::Vote(decode(body)?),
        Kind::Committed => Record::Committed(decode(body)?),
        Kind::Truncate => Record::Truncate(decode(body)?),
        Kind::Purge => Record::Purge(decode(body)?),
        Kind::Checkpoint => Record::Checkpoint(decode(body)?),
    })
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, NodeId(2)), index),
            payload: EntryPayload::Blank,
        }
    }

    fn framed(r: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        r.write_to(&mut out).unwrap();
        out
    }

    #[test]
    fn every_kind_round_trips() {
        let records = [
            Record::Entry(Box::new(entry(7))),
            Record::Vote(openraft::Vote::new(4, NodeId(1))),
            Record::Committed(Some(entry(6).log_id)),
            Record::Committed(None),
            Record::Truncate(9),
            Record::Purge(entry(2).log_id),
            Record::Checkpoint(Checkpoint {
                vote: Some(openraft::Vote::new(4, NodeId(1))),
                committed: Some(entry(6).log_id),
                last_purged: None,
            }),
        ];
        for r in records {
            let buf = framed(&r);
            match parse(&buf) {
                Parsed::Record { kind, body, total } => {
                    assert_eq!(total, buf.len());
                    assert_eq!(decode_record(kind, body).unwrap(), r);
                }
                other => panic!("{r:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn zeroes_end_the_log_and_every_flipped_or_missing_byte_is_refused() {
        assert_eq!(parse(&[0u8; 64]), Parsed::End);
        assert_eq!(parse(&[]), Parsed::End);
        let buf = framed(&Record::Entry(Box::new(entry(1))));
        for cut in 4..buf.len() {
            assert!(
                matches!(parse(&buf[..cut]), Parsed::Bad(_)),
                "cut at {cut} of {}",
                buf.len()
            );
        }
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0x10;
            match parse(&b) {
                Parsed::Bad(_) | Parsed::End => {}
                Parsed::Record { .. } => panic!("a flipped byte {i} passed"),
            }
        }
    }

    #[test]
    fn a_length_past_the_bound_is_refused_without_reading_it() {
        let mut b = ((RECORD_BYTES_MAX + 1) as u32).to_le_bytes().to_vec();
        b.extend_from_slice(&[1; 16]);
        assert!(matches!(parse(&b), Parsed::Bad(m) if m.contains("at most")));
    }
}
