//! RPC frames ([`crate::codec`]) carrying [`RpcRequest`]s and [`RpcResponse`]s.
//!
//! The input is a frame bound (`frame_bytes_max`, 4 bytes) and a frame. Properties: a header
//! accepted announces a frame within the bound (and the hard maximum); a frame accepted as a
//! message of either direction re-encodes, no longer than it came and within the same bound,
//! to a frame that decodes and re-encodes to the same bytes (a fixed point: the encoding is
//! canonical up to bincode's variable-length integers, read in any width); a frame of the
//! other direction is refused. The same holds with the header and checksum made right around
//! the input's bytes as a body, so the message decoders are reached.

use crate::codec::{check_header, FrameKind, FRAME_HEADER_LEN, FRAME_MAGIC, FRAME_VERSION};
use crate::config::FRAME_BYTES_HARD_MAX;
use crate::rpc::{RpcRequest, RpcResponse};
use kvfabric_store::fuzzing::Input;

/// A frame of `kind` around `body`, header and checksum right.
fn framed(kind: FrameKind, body: &[u8]) -> Vec<u8> {
    let mut out = FRAME_MAGIC.to_vec();
    out.extend_from_slice(&FRAME_VERSION.to_le_bytes());
    out.extend_from_slice(&[kind as u8, 0]);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&blake3::hash(body).as_bytes()[..8]);
    out.extend_from_slice(body);
    out
}

/// `decode` accepts `frame` only as a whole, checked frame, and what it accepts re-encodes to
/// a fixed point within `max`.
fn check_message<T>(
    frame: &[u8],
    max: usize,
    decode: fn(&[u8], usize) -> Result<T, crate::DirectoryError>,
    encode: fn(&T, usize) -> Result<Vec<u8>, crate::DirectoryError>,
) -> bool {
    let Ok(msg) = decode(frame, max) else {
        return false;
    };
    assert!(
        frame.len() <= max.min(FRAME_BYTES_HARD_MAX as usize),
        "a frame past the bound"
    );
    let once = encode(&msg, max).expect("a decoded message re-encodes within the bound");
    assert!(once.len() <= frame.len(), "re-encoding is longer");
    let again = decode(&once, max).expect("a re-encoded message decodes");
    let twice = encode(&again, max).expect("re-encodes again");
    assert_eq!(once, twice, "re-encoding is not a fixed point");
    true
}

fn check_frame(frame: &[u8], max: usize) {
    for kind in [FrameKind::Request, FrameKind::Response] {
        if let Ok(n) = check_header(frame, kind, max) {
            assert_eq!(frame[6], kind as u8);
            assert!(
                FRAME_HEADER_LEN + n <= max.min(FRAME_BYTES_HARD_MAX as usize),
                "bound"
            );
        }
    }
    let request = check_message(frame, max, RpcRequest::decode, RpcRequest::encode);
    let response = check_message(frame, max, RpcResponse::decode, RpcResponse::encode);
    assert!(
        !(request && response),
        "one frame decoded as both directions"
    );
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let max = input.u32() as usize;
    let frame = input.bytes(usize::MAX);
    check_frame(frame, max);
    for kind in [FrameKind::Request, FrameKind::Response] {
        check_frame(&framed(kind, frame), max);
    }
}
