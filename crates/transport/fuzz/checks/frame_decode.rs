//! The frame header decoder, fuzzed with arbitrary bytes and an arbitrary size bound.
//!
//! Checks, besides "never panics": an accepted header re-encodes to exactly the bytes it was
//! decoded from (one encoding per header), respects the bound (a `Lease` also the descriptor
//! bounds), and a request decoder accepts only `Fetch`, `FetchRma` and `Release`; a response
//! decoder never accepts a header for another block, nor an answer of the other request kind
//! (`Block` answers `Fetch`, `Lease` answers `FetchRma`). The lease descriptor decoder runs on
//! the same bytes: it never panics, and what it accepts re-encodes to them.
//!
//! Shared by the fuzz target (`fuzz_targets/frame_decode.rs`) and the stable corpus replay
//! (`tests/fuzz_corpus.rs`), which include this file.

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::frame::{
    decode_request, decode_response, FrameHeader, FrameKind, FRAME_HEADER_LEN,
};
use kvfabric_transport::lease::{
    LeaseDescriptor, LEASE_DESCRIPTOR_BYTES_MAX, LEASE_DESCRIPTOR_BYTES_MIN,
};

/// Checks the properties on `data` (see the module docs).
pub(crate) fn run(data: &[u8]) {
    let (max, bytes) = match data.split_first_chunk::<8>() {
        Some((m, rest)) => (u64::from_le_bytes(*m), rest),
        None => (u64::MAX, data),
    };
    if let Ok(h) = FrameHeader::decode(bytes, max) {
        assert_eq!(&h.encode()[..], &bytes[..FRAME_HEADER_LEN]);
        assert!(h.length <= max);
        assert!(h.kind.has_payload() || h.length == 0);
        if h.kind == FrameKind::Lease {
            let n = h.length as usize;
            assert!((LEASE_DESCRIPTOR_BYTES_MIN..=LEASE_DESCRIPTOR_BYTES_MAX).contains(&n));
        }
    }
    if let Ok(h) = decode_request(bytes) {
        assert!(h.kind.is_request());
        assert_eq!(h.length, 0);
    }
    let (ns, id) = (NamespaceKey([0x11; 32]), BlockId([0x22; 32]));
    for kind in [FrameKind::Fetch, FrameKind::FetchRma] {
        let request = FrameHeader::request(kind, ns, id);
        if let Ok(h) = decode_response(bytes, &request, max) {
            assert_eq!((h.id, h.namespace), (request.id, request.namespace));
            assert!(!h.kind.is_request());
            let other = if kind == FrameKind::Fetch {
                FrameKind::Lease
            } else {
                FrameKind::Block
            };
            assert_ne!(h.kind, other);
        }
    }
    if let Ok(d) = LeaseDescriptor::decode(bytes, max) {
        assert_eq!(d.encode(), bytes);
        assert!(d.block_len <= max);
    }
}
