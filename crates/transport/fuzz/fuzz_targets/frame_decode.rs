//! Fuzzes the frame header decoder with arbitrary bytes and an arbitrary size bound.
//!
//! Checks, besides "never panics": an accepted header re-encodes to exactly the bytes it was
//! decoded from (one encoding per header), respects the bound, and a request decoder never
//! accepts anything but `Fetch`; a response decoder never accepts a header for another block.

#![no_main]

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::frame::{
    decode_request, decode_response, FrameHeader, FrameKind, FRAME_HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (max, bytes) = match data.split_first_chunk::<8>() {
        Some((m, rest)) => (u64::from_le_bytes(*m), rest),
        None => (u64::MAX, data),
    };
    if let Ok(h) = FrameHeader::decode(bytes, max) {
        assert_eq!(&h.encode()[..], &bytes[..FRAME_HEADER_LEN]);
        assert!(h.length <= max);
        assert!(h.kind == FrameKind::Block || h.length == 0);
    }
    if let Ok(h) = decode_request(bytes) {
        assert_eq!(h.kind, FrameKind::Fetch);
        assert_eq!(h.length, 0);
    }
    let request = FrameHeader::fetch(NamespaceKey([0x11; 32]), BlockId([0x22; 32]));
    if let Ok(h) = decode_response(bytes, &request, max) {
        assert_eq!((h.id, h.namespace), (request.id, request.namespace));
        assert_ne!(h.kind, FrameKind::Fetch);
    }
});
