//! Shard snapshots ([`crate::storage::snapshot`]).
//!
//! The input is a shard id (1 byte) and a snapshot. Properties: a snapshot accepted belongs
//! to the shard asked for, holds a state that keeps the shard's invariants
//! ([`ShardState::check_invariants`]), and re-encodes, no longer than it came, to a snapshot
//! that decodes to the same state. The same holds with the header and checksum made right
//! around the input's bytes as a body, so the state decoder is reached.

use crate::ids::ShardId;
use crate::shard::ShardState;
use crate::storage::snapshot::{
    decode_snapshot, encode_snapshot, SNAPSHOT_MAGIC, SNAPSHOT_VERSION,
};
use kvfabric_store::fuzzing::Input;

/// A snapshot of `shard` around `body`, header and checksum right.
fn framed(shard: ShardId, body: &[u8]) -> Vec<u8> {
    let mut out = SNAPSHOT_MAGIC.to_vec();
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&shard.0.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&blake3::hash(body).as_bytes()[..8]);
    out.extend_from_slice(body);
    out
}

fn check(bytes: &[u8], shard: ShardId) {
    let Ok(state) = decode_snapshot(bytes, shard) else {
        return;
    };
    assert_eq!(state.shard(), shard, "the shard asked for");
    if let Err(e) = state.check_invariants() {
        panic!("accepted a state that breaks an invariant: {e}");
    }
    let again = encode_snapshot(&state).expect("a decoded state encodes");
    assert!(again.len() <= bytes.len(), "re-encoding is longer");
    let decoded: ShardState = decode_snapshot(&again, shard).expect("a re-encoded state decodes");
    assert_eq!(decoded, state, "re-encoded state");
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let shard = ShardId(u32::from(input.u8() % 4));
    let bytes = input.bytes(usize::MAX);
    check(bytes, shard);
    check(&framed(shard, bytes), shard);
}
