//! The entry header: encoding, decoding and the checks that make a torn or flipped header
//! detectable. The byte table is in the [disk module docs](super).
//!
//! Decoding checks the magic first (cheap rejection while resyncing), then the header
//! checksum (so any flipped bit is caught before a field is trusted), then field semantics.

use crate::id::{BlockId, NamespaceKey};

/// First four bytes of every entry.
pub const ENTRY_MAGIC: [u8; 4] = *b"KVFE";
/// Entry format version written by this build (the only one it reads).
pub const ENTRY_VERSION: u16 = 1;
/// Largest payload an entry may declare; bounds what a decoded length can make a reader do.
pub const ENTRY_PAYLOAD_MAX_BYTES: u64 = 1 << 32;
/// Bytes of an encoded [`EntryHeader`].
pub const ENTRY_HEADER_LEN: u64 = EntryHeader::serialized_len() as u64;

/// Bytes covered by the header checksum (everything before it).
const CHECKSUMMED_LEN: usize = 96;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A block: the payload is the block's bytes.
    Block,
    /// A tombstone: frees the block entry whose sequence number is `target_seq`; no payload.
    Tombstone,
}

impl EntryKind {
    const fn code(self) -> u8 {
        match self {
            EntryKind::Block => 1,
            EntryKind::Tombstone => 2,
        }
    }

    const fn from_code(code: u8) -> Option<EntryKind> {
        match code {
            1 => Some(EntryKind::Block),
            2 => Some(EntryKind::Tombstone),
            _ => None,
        }
    }
}

/// The fixed-width header in front of every entry's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    /// Block or tombstone.
    pub kind: EntryKind,
    /// Sequence number, unique in the tier and never reused; a block's handles carry it as
    /// their generation. Compaction copies an entry verbatim, so copies share it.
    pub seq: u64,
    /// For a tombstone, the sequence number of the block entry it frees; 0 for a block.
    pub target_seq: u64,
    /// Payload bytes following the header (0 for a tombstone).
    pub payload_len: u64,
    /// The block's id (for a tombstone: the freed block's id).
    pub id: BlockId,
    /// The namespace key the id was computed under.
    pub namespace: NamespaceKey,
}

/// Why bytes are not a valid entry header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryDecodeError {
    /// Fewer bytes than a header.
    #[error("entry header: expected {expected} bytes, found {found}")]
    Short {
        /// Header length.
        expected: usize,
        /// Bytes available.
        found: usize,
    },
    /// The magic is not [`ENTRY_MAGIC`].
    #[error("entry header: expected magic {expected:02x?}, found {found:02x?}")]
    Magic {
        /// [`ENTRY_MAGIC`].
        expected: [u8; 4],
        /// Bytes found.
        found: [u8; 4],
    },
    /// The header checksum does not match the header's bytes (torn or flipped).
    #[error("entry header: checksum expected {expected:#018x}, found {found:#018x}")]
    Checksum {
        /// Checksum computed over the header's bytes.
        expected: u64,
        /// Checksum stored in the header.
        found: u64,
    },
    /// A version this build does not read.
    #[error("entry header: expected version {expected}, found {found}")]
    Version {
        /// [`ENTRY_VERSION`].
        expected: u16,
        /// Version found.
        found: u16,
    },
    /// Fields that are individually well-formed but inconsistent.
    #[error("entry header: {0}")]
    Field(&'static str),
}

/// First 8 bytes (little-endian) of the blake3 hash of `bytes`.
pub(crate) fn checksum64(bytes: &[u8]) -> u64 {
    let h = blake3::hash(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn arr32(b: &[u8], at: usize) -> [u8; 32] {
    let mut x = [0u8; 32];
    x.copy_from_slice(&b[at..at + 32]);
    x
}

impl EntryHeader {
    /// Bytes of the encoded header.
    pub const fn serialized_len() -> usize {
        CHECKSUMMED_LEN + 8
    }

    /// The header of a block entry.
    pub fn block(seq: u64, id: BlockId, namespace: NamespaceKey, payload_len: u64) -> Self {
        EntryHeader {
            kind: EntryKind::Block,
            seq,
            target_seq: 0,
            payload_len,
            id,
            namespace,
        }
    }

    /// The header of a tombstone freeing the block entry `target_seq`.
    pub fn tombstone(seq: u64, target_seq: u64, id: BlockId, namespace: NamespaceKey) -> Self {
        EntryHeader {
            kind: EntryKind::Tombstone,
            seq,
            target_seq,
            payload_len: 0,
            id,
            namespace,
        }
    }

    /// Header plus payload bytes.
    pub fn entry_len(&self) -> u64 {
        ENTRY_HEADER_LEN + self.payload_len
    }

    /// Encodes the header (little-endian, fixed widths, checksum last).
    pub fn encode(&self) -> [u8; EntryHeader::serialized_len()] {
        let mut b = [0u8; EntryHeader::serialized_len()];
        b[0..4].copy_from_slice(&ENTRY_MAGIC);
        b[4..6].copy_from_slice(&ENTRY_VERSION.to_le_bytes());
        b[6] = self.kind.code();
        // b[7]: reserved, zero.
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.target_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.payload_len.to_le_bytes());
        b[32..64].copy_from_slice(&self.id.0);
        b[64..96].copy_from_slice(&self.namespace.0);
        let sum = checksum64(&b[..CHECKSUMMED_LEN]);
        b[CHECKSUMMED_LEN..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and checks a header from the first [`EntryHeader::serialized_len`] bytes.
    pub fn decode(b: &[u8]) -> Result<EntryHeader, EntryDecodeError> {
        let len = EntryHeader::serialized_len();
        if b.len() < len {
            return Err(EntryDecodeError::Short {
                expected: len,
                found: b.len(),
            });
        }
        let b = &b[..len];
        if b[0..4] != ENTRY_MAGIC {
            let mut found = [0u8; 4];
            found.copy_from_slice(&b[0..4]);
            return Err(EntryDecodeError::Magic {
                expected: ENTRY_MAGIC,
                found,
            });
        }
        let expected = checksum64(&b[..CHECKSUMMED_LEN]);
        let found = le_u64(b, CHECKSUMMED_LEN);
        if expected != found {
            return Err(EntryDecodeError::Checksum { expected, found });
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != ENTRY_VERSION {
            return Err(EntryDecodeError::Version {
                expected: ENTRY_VERSION,
                found: version,
            });
        }
        let kind = EntryKind::from_code(b[6]).ok_or(EntryDecodeError::Field(
            "kind is neither block (1) nor tombstone (2)",
        ))?;
        if b[7] != 0 {
            return Err(EntryDecodeError::Field("reserved byte 7 is not zero"));
        }
        let h = EntryHeader {
            kind,
            seq: le_u64(b, 8),
            target_seq: le_u64(b, 16),
            payload_len: le_u64(b, 24),
            id: BlockId(arr32(b, 32)),
            namespace: NamespaceKey(arr32(b, 64)),
        };
        if h.seq == 0 {
            return Err(EntryDecodeError::Field(
                "sequence number 0 is never written",
            ));
        }
        if h.payload_len > ENTRY_PAYLOAD_MAX_BYTES {
            return Err(EntryDecodeError::Field(
                "payload length exceeds ENTRY_PAYLOAD_MAX_BYTES",
            ));
        }
        match h.kind {
            EntryKind::Block if h.target_seq != 0 => Err(EntryDecodeError::Field(
                "a block entry has a non-zero target",
            )),
            EntryKind::Tombstone if h.payload_len != 0 => {
                Err(EntryDecodeError::Field("a tombstone has a payload"))
            }
            EntryKind::Tombstone if h.target_seq == 0 || h.target_seq >= h.seq => Err(
                EntryDecodeError::Field("a tombstone's target is not an earlier entry"),
            ),
            _ => Ok(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EntryHeader {
        EntryHeader::block(42, BlockId([7; 32]), NamespaceKey::derive("t"), 4_718_592)
    }

    #[test]
    fn disk_entry_header_round_trips() {
        let h = sample();
        let b = h.encode();
        assert_eq!(b.len() as u64, ENTRY_HEADER_LEN);
        assert_eq!(EntryHeader::decode(&b), Ok(h));
        let t = EntryHeader::tombstone(43, 42, h.id, h.namespace);
        assert_eq!(EntryHeader::decode(&t.encode()), Ok(t));
        assert_eq!(t.entry_len(), ENTRY_HEADER_LEN);
    }

    #[test]
    fn disk_entry_header_layout_is_pinned() {
        let b = sample().encode();
        assert_eq!(&b[0..4], b"KVFE");
        assert_eq!(&b[4..6], &[1, 0], "version 1, little-endian");
        assert_eq!(b[6], 1, "kind block");
        assert_eq!(&b[8..16], &42u64.to_le_bytes());
        assert_eq!(&b[24..32], &4_718_592u64.to_le_bytes());
        assert_eq!(&b[32..64], &[7u8; 32]);
    }

    #[test]
    fn disk_entry_header_detects_every_single_bit_flip() {
        let b = sample().encode();
        for bit in 0..b.len() * 8 {
            let mut f = b;
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(
                EntryHeader::decode(&f).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn disk_entry_header_rejects_short_and_inconsistent() {
        let b = sample().encode();
        assert!(matches!(
            EntryHeader::decode(&b[..50]),
            Err(EntryDecodeError::Short { .. })
        ));
        // A tombstone pointing at itself: checksum valid, semantics not.
        let bad = EntryHeader::tombstone(5, 5, BlockId([0; 32]), NamespaceKey([0; 32]));
        assert!(matches!(
            EntryHeader::decode(&bad.encode()),
            Err(EntryDecodeError::Field(_))
        ));
    }
}
