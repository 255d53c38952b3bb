//! The 64-byte block header ([`crate::block`]) against its byte table.
//!
//! Properties: the decoder accepts exactly the inputs the table allows (length, magic,
//! version, header length, the one flag value, zero reserved bytes) and refuses the rest with
//! [`StoreError::Header`]; what it accepts re-encodes to the same 64 bytes (one encoding per
//! header); every header with the flag set, whatever its other fields, decodes back to itself.

use super::Input;
use crate::block::{BlockHeader, FLAG_ROPE_CANONICAL, HEADER_LEN, MAGIC, VERSION};
use crate::error::StoreError;

/// Whether `b` is a header the byte table allows, read independently of the decoder.
fn allowed(b: &[u8]) -> bool {
    let le16 = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    b.len() >= HEADER_LEN
        && b[0..4] == MAGIC
        && le16(4) == VERSION
        && usize::from(le16(6)) == HEADER_LEN
        && b[36..40] == FLAG_ROPE_CANONICAL.to_le_bytes()
        && b[48..64].iter().all(|&x| x == 0)
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    match BlockHeader::decode(data) {
        Ok(h) => {
            assert!(allowed(data), "accepted a header the table refuses: {h:?}");
            assert_eq!(h.encode()[..], data[..HEADER_LEN], "re-encoding differs");
        }
        Err(StoreError::Header(why)) => {
            assert!(!allowed(data), "refused an allowed header: {why}");
        }
        Err(other) => panic!("a header error expected, found {other:?}"),
    }
    let mut input = Input::new(data);
    let h = BlockHeader {
        fingerprint: input.array(),
        tokens: input.u32(),
        layers: input.u32(),
        regions: input.u32(),
        flags: FLAG_ROPE_CANONICAL,
        payload_len: input.u64(),
    };
    assert_eq!(BlockHeader::decode(&h.encode()).ok(), Some(h), "round trip");
}
