//! The canonical block: a fixed 64-byte header followed by the payload.
//!
//! | offset | bytes | field                                                     |
//! |-------:|------:|-----------------------------------------------------------|
//! |      0 |     4 | magic `KVFB`                                              |
//! |      4 |     2 | format version, u16 LE (= 1)                              |
//! |      6 |     2 | header length, u16 LE (= 64)                              |
//! |      8 |    16 | geometry fingerprint ([`ModelGeometry::fingerprint`])     |
//! |     24 |     4 | token count, u32 LE (= the geometry's block tokens)       |
//! |     28 |     4 | layer count, u32 LE                                       |
//! |     32 |     4 | region count across layers, u32 LE                        |
//! |     36 |     4 | flags, u32 LE: bit 0 = `k_rope` canonical (always set)    |
//! |     40 |     8 | payload length, u64 LE                                    |
//! |     48 |    16 | reserved, zero                                            |
//! |     64 |     n | payload ([`crate::geometry::layout`])                     |
//!
//! The [`crate::BlockId`] covers header and payload, so a block of one geometry can never share
//! an id with the same bytes read under another.

use crate::error::StoreError;
use crate::geometry::ModelGeometry;

/// Header magic.
pub const MAGIC: [u8; 4] = *b"KVFB";
/// Current format version.
pub const VERSION: u16 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 64;
/// Flag bit: `k_rope` rows are stored un-rotated.
pub const FLAG_ROPE_CANONICAL: u32 = 1;

/// The decoded header of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Geometry fingerprint.
    pub fingerprint: [u8; 16],
    /// Tokens in the block.
    pub tokens: u32,
    /// Layers in the payload.
    pub layers: u32,
    /// Regions across layers.
    pub regions: u32,
    /// Flags.
    pub flags: u32,
    /// Payload length.
    pub payload_len: u64,
}

impl BlockHeader {
    /// The header a payload of `geometry` gets.
    pub fn for_geometry(geometry: &ModelGeometry) -> BlockHeader {
        let layout = geometry.block_layout();
        BlockHeader {
            fingerprint: geometry.fingerprint(),
            tokens: layout.block_tokens,
            layers: layout.layers.len() as u32,
            regions: layout.region_count(),
            flags: FLAG_ROPE_CANONICAL,
            payload_len: layout.payload_len,
        }
    }

    /// Little-endian encoding per the table above.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        b[8..24].copy_from_slice(&self.fingerprint);
        b[24..28].copy_from_slice(&self.tokens.to_le_bytes());
        b[28..32].copy_from_slice(&self.layers.to_le_bytes());
        b[32..36].copy_from_slice(&self.regions.to_le_bytes());
        b[36..40].copy_from_slice(&self.flags.to_le_bytes());
        b[40..48].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    /// Decodes and checks magic, version, length, flags and reserved bytes.
    pub fn decode(b: &[u8]) -> Result<BlockHeader, StoreError> {
        let bad = |what: String| Err(StoreError::Header(what));
        if b.len() < HEADER_LEN {
            return bad(format!("expected {HEADER_LEN} bytes, found {}", b.len()));
        }
        if b[0..4] != MAGIC {
            return bad(format!("expected magic {:?}, found {:?}", MAGIC, &b[0..4]));
        }
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if u16_at(4) != VERSION {
            return bad(format!("expected version {VERSION}, found {}", u16_at(4)));
        }
        if usize::from(u16_at(6)) != HEADER_LEN {
            return bad(format!(
                "expected header length {HEADER_LEN}, found {}",
                u16_at(6)
            ));
        }
        let flags = u32_at(36);
        if flags != FLAG_ROPE_CANONICAL {
            return bad(format!(
                "expected flags {FLAG_ROPE_CANONICAL:#x}, found {flags:#x}"
            ));
        }
        if b[48..64].iter().any(|&x| x != 0) {
            return bad("reserved bytes 48..64 are not zero".to_string());
        }
        let mut fingerprint = [0u8; 16];
        fingerprint.copy_from_slice(&b[8..24]);
        Ok(BlockHeader {
            fingerprint,
            tokens: u32_at(24),
            layers: u32_at(28),
            regions: u32_at(32),
            flags,
            payload_len: u64::from_le_bytes(b[40..48].try_into().expect("8 bytes")),
        })
    }
}
