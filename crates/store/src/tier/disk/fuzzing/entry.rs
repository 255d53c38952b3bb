//! The disk entry header ([`EntryHeader`]) against its byte table.
//!
//! Properties: a header accepted as found re-encodes to the same bytes. With magic and
//! checksum made right (so the fields' own checks are reached), the decoder accepts exactly
//! the field combinations the table allows, refuses the others with a field or version error,
//! and what it accepts re-encodes to the same bytes; flipping any one bit of an accepted
//! header makes it refused.

use super::super::entry::checksum64;
use super::super::{EntryDecodeError, EntryHeader, ENTRY_MAGIC, ENTRY_PAYLOAD_MAX_BYTES};
use crate::fuzzing::Input;

const LEN: usize = EntryHeader::serialized_len();
/// Bytes covered by the checksum.
const SUMMED: usize = LEN - 8;

/// Whether the fields of `b` (magic and checksum aside) are a header the table allows, read
/// independently of the decoder.
fn fields_allowed(b: &[u8; LEN]) -> bool {
    let le64 = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let (seq, target, payload) = (le64(8), le64(16), le64(24));
    let kind_ok = match b[6] {
        1 => target == 0,
        2 => payload == 0 && target != 0 && target < seq,
        _ => false,
    };
    b[4..6] == [1, 0] && kind_ok && b[7] == 0 && seq != 0 && payload <= ENTRY_PAYLOAD_MAX_BYTES
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    if let Ok(h) = EntryHeader::decode(data) {
        assert_eq!(h.encode()[..], data[..LEN], "re-encoding differs");
    }
    let mut b = [0u8; LEN];
    let n = data.len().min(LEN);
    b[..n].copy_from_slice(&data[..n]);
    b[..4].copy_from_slice(&ENTRY_MAGIC);
    let sum = checksum64(&b[..SUMMED]);
    b[SUMMED..].copy_from_slice(&sum.to_le_bytes());
    match EntryHeader::decode(&b) {
        Ok(h) => {
            assert!(
                fields_allowed(&b),
                "accepted fields the table refuses: {h:?}"
            );
            assert_eq!(h.encode(), b, "re-encoding differs");
            let bit =
                usize::from(Input::new(data.get(LEN..).unwrap_or_default()).u16()) % (LEN * 8);
            let mut flipped = b;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                EntryHeader::decode(&flipped).is_err(),
                "a flip of bit {bit} went unnoticed"
            );
        }
        Err(EntryDecodeError::Field(_) | EntryDecodeError::Version { .. }) => {
            assert!(!fields_allowed(&b), "refused fields the table allows");
        }
        Err(other) => panic!("magic and checksum were made right, yet: {other}"),
    }
}
