//! The byte format of a shard snapshot, as pure functions.
//!
//! | offset | bytes | field                                                      |
//! |-------:|------:|------------------------------------------------------------|
//! |      0 |     8 | magic `KVFDSNAP`                                           |
//! |      8 |     2 | format version, u16 LE (= 1)                               |
//! |     10 |     4 | shard id, u32 LE                                           |
//! |     14 |     8 | body length, u64 LE                                        |
//! |     22 |     8 | first 8 bytes of blake3(body)                              |
//! |     30 |     … | body: bincode (standard config) of the `ShardState`        |
//!
//! The same bytes are persisted by the member that built the snapshot and streamed to a member
//! that installs it, which checks every header field and the checksum before decoding, and the
//! decoded state against the shard's invariants ([`ShardState::check_invariants`]) after.

use crate::error::DirectoryError;
use crate::ids::ShardId;
use crate::shard::ShardState;

/// Magic at the start of every snapshot.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"KVFDSNAP";
/// The snapshot format this crate writes and reads.
pub const SNAPSHOT_VERSION: u16 = 1;
/// Length of the header before the body.
pub const SNAPSHOT_HEADER_LEN: usize = 8 + 2 + 4 + 8 + 8;
/// No snapshot body may decode past this many bytes.
const SNAPSHOT_BODY_MAX: usize = 1 << 34;

fn checksum(body: &[u8]) -> [u8; 8] {
    let h = blake3::hash(body);
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.as_bytes()[..8]);
    out
}

/// Serializes a shard state with its header.
pub fn encode_snapshot(state: &ShardState) -> Result<Vec<u8>, DirectoryError> {
    let body = bincode::serde::encode_to_vec(state, bincode::config::standard()).map_err(|e| {
        DirectoryError::Corrupt {
            what: "snapshot",
            reason: format!("encode: {e}"),
        }
    })?;
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&state.shard().0.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(&body));
    out.extend_from_slice(&body);
    Ok(out)
}

fn corrupt(reason: String) -> DirectoryError {
    DirectoryError::Corrupt {
        what: "snapshot",
        reason,
    }
}

/// Checks and decodes a snapshot of `shard`.
pub fn decode_snapshot(bytes: &[u8], shard: ShardId) -> Result<ShardState, DirectoryError> {
    if bytes.len() < SNAPSHOT_HEADER_LEN {
        return Err(corrupt(format!(
            "at least {SNAPSHOT_HEADER_LEN} bytes expected, found {}",
            bytes.len()
        )));
    }
    let (header, body) = bytes.split_at(SNAPSHOT_HEADER_LEN);
    if header[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt(format!(
            "magic {SNAPSHOT_MAGIC:?} expected, found {:?}",
            &header[..8]
        )));
    }
    let version = u16::from_le_bytes([header[8], header[9]]);
    if version != SNAPSHOT_VERSION {
        return Err(corrupt(format!(
            "version {SNAPSHOT_VERSION} expected, found {version}"
        )));
    }
    let found = ShardId(u32::from_le_bytes(
        header[10..14].try_into().expect("4 bytes"),
    ));
    if found != shard {
        return Err(DirectoryError::ShardMismatch {
            expected: shard,
            found,
        });
    }
    let len = u64::from_le_bytes(header[14..22].try_into().expect("8 bytes"));
    if len != body.len() as u64 {
        return Err(corrupt(format!(
            "body of {len} bytes expected, found {}",
            body.len()
        )));
    }
    if header[22..30] != checksum(body) {
        return Err(corrupt("checksum mismatch".into()));
    }
    let config = bincode::config::standard().with_limit::<SNAPSHOT_BODY_MAX>();
    let (mut state, used): (ShardState, usize) =
        crate::nesting::decode_from_slice(body, config).map_err(|e| corrupt(e.to_string()))?;
    if used != body.len() {
        return Err(corrupt(format!(
            "body of {} bytes expected, found {used} decoded",
            body.len()
        )));
    }
    if state.shard() != shard {
        return Err(DirectoryError::ShardMismatch {
            expected: shard,
            found: state.shard(),
        });
    }
    state.rebuild_indexes();
    if let Some(reason) = state.content_violation() {
        return Err(corrupt(format!(
            "a state that keeps the shard's invariants expected: {reason}"
        )));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::ids::NodeId;

    #[test]
    fn round_trip_and_every_check() {
        let mut s = ShardState::new(ShardId(2));
        s.apply(&Command::Join {
            node: NodeId(1),
            until_ms: 10,
        });
        let bytes = encode_snapshot(&s).unwrap();
        assert_eq!(decode_snapshot(&bytes, ShardId(2)).unwrap(), s);
        assert!(matches!(
            decode_snapshot(&bytes, ShardId(3)),
            Err(DirectoryError::ShardMismatch { .. })
        ));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                decode_snapshot(&bad, ShardId(2)).is_err(),
                "flip at {i} accepted"
            );
        }
        assert!(decode_snapshot(&bytes[..bytes.len() - 1], ShardId(2)).is_err());
    }
}
