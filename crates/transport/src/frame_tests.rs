use super::*;
use proptest::prelude::*;

fn header(kind: FrameKind, length: u64) -> FrameHeader {
    FrameHeader {
        kind,
        id: BlockId([7; 32]),
        namespace: NamespaceKey::derive("tenant-a"),
        length,
    }
}

#[test]
fn header_length_is_the_documented_table() {
    let bytes = header(FrameKind::Block, 0x0102_0304_0506_0708).encode();
    assert_eq!(bytes.len(), 79);
    assert_eq!(&bytes[0..4], b"KVFT");
    assert_eq!(&bytes[4..6], &1u16.to_le_bytes());
    assert_eq!(bytes[6], 2);
    assert_eq!(&bytes[7..39], &[7u8; 32]);
    assert_eq!(&bytes[39..71], &NamespaceKey::derive("tenant-a").0);
    assert_eq!(&bytes[71..79], &0x0102_0304_0506_0708u64.to_le_bytes());
}

#[test]
fn round_trips_every_kind() {
    for (kind, len) in [
        (FrameKind::Fetch, 0),
        (FrameKind::Block, 4_497_472),
        (FrameKind::NotFound, 0),
        (FrameKind::Unavailable, 0),
        (FrameKind::Lease, 350),
        (FrameKind::FetchRma, 0),
        (FrameKind::Release, 0),
        (FrameKind::Push, 4_497_472),
        (FrameKind::Stored, 0),
        (FrameKind::Rejected, 0),
        (FrameKind::Probe, 0),
        (FrameKind::Held, HELD_LENGTH),
    ] {
        let h = header(kind, len);
        assert_eq!(FrameHeader::decode(&h.encode(), u64::MAX), Ok(h));
        assert_eq!(FrameKind::from_code(kind as u8), Some(kind));
        assert!(FrameKind::CODES.contains(&(kind as u8)));
    }
}

#[test]
fn the_existing_codes_never_move() {
    // The wire contract: extended (5..=7, then 8..=12), never renumbered.
    let codes = [
        (FrameKind::Fetch, 1),
        (FrameKind::Block, 2),
        (FrameKind::NotFound, 3),
        (FrameKind::Unavailable, 4),
        (FrameKind::Lease, 5),
        (FrameKind::FetchRma, 6),
        (FrameKind::Release, 7),
        (FrameKind::Push, 8),
        (FrameKind::Stored, 9),
        (FrameKind::Rejected, 10),
        (FrameKind::Probe, 11),
        (FrameKind::Held, 12),
    ];
    for (kind, code) in codes {
        assert_eq!(kind as u8, code, "{kind:?}");
    }
    for code in [0u8, 13, 255] {
        assert_eq!(FrameKind::from_code(code), None);
    }
    let mut b = header(FrameKind::Fetch, 0).encode();
    b[6] = 13;
    let err = FrameHeader::decode(&b, 0).unwrap_err();
    assert_eq!(err, FrameError::UnknownKind { found: 13 });
    assert_eq!(
        err.to_string(),
        "unknown frame kind: expected 1..=12, found 13"
    );
}

#[test]
fn lease_lengths_are_bounded_by_the_descriptor_size() {
    use crate::lease::{LEASE_DESCRIPTOR_BYTES_MAX, LEASE_DESCRIPTOR_BYTES_MIN};
    for len in [LEASE_DESCRIPTOR_BYTES_MIN, LEASE_DESCRIPTOR_BYTES_MAX] {
        let h = header(FrameKind::Lease, len as u64);
        assert_eq!(FrameHeader::decode(&h.encode(), u64::MAX), Ok(h));
    }
    for len in [
        0,
        LEASE_DESCRIPTOR_BYTES_MIN - 1,
        LEASE_DESCRIPTOR_BYTES_MAX + 1,
    ] {
        let b = header(FrameKind::Lease, len as u64).encode();
        assert_eq!(
            FrameHeader::decode(&b, u64::MAX),
            Err(FrameError::BadLeaseLength {
                min: LEASE_DESCRIPTOR_BYTES_MIN as u64,
                max: LEASE_DESCRIPTOR_BYTES_MAX as u64,
                found: len as u64
            })
        );
    }
    for kind in [FrameKind::FetchRma, FrameKind::Release] {
        let b = header(kind, 1).encode();
        assert_eq!(
            FrameHeader::decode(&b, u64::MAX),
            Err(FrameError::UnexpectedLength { kind, found: 1 })
        );
    }
}

#[test]
fn each_request_kind_accepts_only_its_answers() {
    let fetch = header(FrameKind::Fetch, 0);
    let rma = header(FrameKind::FetchRma, 0);
    let block = header(FrameKind::Block, 10);
    let lease = header(FrameKind::Lease, 100);
    assert_eq!(decode_response(&block.encode(), &fetch, 100), Ok(block));
    assert_eq!(decode_response(&lease.encode(), &rma, 100), Ok(lease));
    assert!(matches!(
        decode_response(&lease.encode(), &fetch, 100),
        Err(FrameError::UnexpectedKind {
            found: FrameKind::Lease,
            ..
        })
    ));
    assert!(matches!(
        decode_response(&block.encode(), &rma, 100),
        Err(FrameError::UnexpectedKind {
            found: FrameKind::Block,
            ..
        })
    ));
    for answer in [FrameKind::NotFound, FrameKind::Unavailable] {
        let h = header(answer, 0);
        assert_eq!(decode_response(&h.encode(), &fetch, 100), Ok(h));
        assert_eq!(decode_response(&h.encode(), &rma, 100), Ok(h));
    }
    for request in [FrameKind::Fetch, FrameKind::FetchRma, FrameKind::Release] {
        let h = header(request, 0);
        assert_eq!(decode_request(&h.encode()), Ok(h));
        assert!(decode_response(&h.encode(), &rma, 100).is_err());
    }
    assert!(matches!(
        decode_request(&lease.encode()),
        Err(FrameError::UnexpectedKind {
            found: FrameKind::Lease,
            ..
        })
    ));
}

#[test]
fn push_and_probe_are_answered_only_by_their_own_kinds() {
    let push = header(FrameKind::Push, 1000);
    let probe = header(FrameKind::Probe, 0);
    // A push carries its block: only the bounded decoder takes it, within the bound.
    assert!(matches!(
        decode_request(&push.encode()),
        Err(FrameError::UnexpectedKind {
            found: FrameKind::Push,
            ..
        })
    ));
    assert_eq!(decode_any_request(&push.encode(), 1000), Ok(push));
    assert_eq!(
        decode_any_request(&push.encode(), 999),
        Err(FrameError::TooLarge {
            max: 999,
            found: 1000
        })
    );
    assert_eq!(decode_request(&probe.encode()), Ok(probe));
    for answer in [
        FrameKind::Stored,
        FrameKind::Rejected,
        FrameKind::Unavailable,
    ] {
        let h = header(answer, 0);
        assert_eq!(decode_response(&h.encode(), &push, 100), Ok(h));
        assert!(
            decode_response(&h.encode(), &header(FrameKind::Fetch, 0), 100).is_err()
                || answer == FrameKind::Unavailable
        );
    }
    let held = header(FrameKind::Held, HELD_LENGTH);
    assert_eq!(decode_response(&held.encode(), &probe, 100), Ok(held));
    for wrong in [FrameKind::Block, FrameKind::Stored, FrameKind::Lease] {
        let len = match wrong {
            FrameKind::Block => 10,
            FrameKind::Lease => 100,
            _ => 0,
        };
        assert!(
            decode_response(&header(wrong, len).encode(), &probe, 100).is_err(),
            "{wrong:?} answers no probe"
        );
        assert!(
            decode_response(&header(wrong, len).encode(), &push, 100).is_err()
                || wrong == FrameKind::Stored,
            "{wrong:?} answers no push"
        );
    }
    // A Held is exactly the stored length, nothing else.
    for bad in [0u64, 7, 9] {
        let mut b = header(FrameKind::Held, HELD_LENGTH).encode();
        b[71..79].copy_from_slice(&bad.to_le_bytes());
        assert_eq!(
            FrameHeader::decode(&b, u64::MAX),
            Err(FrameError::BadHeldLength { found: bad })
        );
    }
    // Answers are not requests, and requests do not answer.
    for answer in [FrameKind::Stored, FrameKind::Rejected] {
        assert!(decode_any_request(&header(answer, 0).encode(), u64::MAX).is_err());
    }
    assert!(decode_response(&probe.encode(), &push, 100).is_err());
}

#[test]
fn refuses_short_input_with_the_lengths() {
    let bytes = header(FrameKind::Fetch, 0).encode();
    assert_eq!(
        FrameHeader::decode(&bytes[..78], 0),
        Err(FrameError::Truncated {
            expected: 79,
            found: 78
        })
    );
    assert_eq!(
        FrameHeader::decode(&[], 0),
        Err(FrameError::Truncated {
            expected: 79,
            found: 0
        })
    );
}

#[test]
fn refuses_bad_magic_version_and_kind() {
    let mut b = header(FrameKind::Fetch, 0).encode();
    b[0] = b'X';
    assert!(matches!(
        FrameHeader::decode(&b, 0),
        Err(FrameError::BadMagic { .. })
    ));
    let mut b = header(FrameKind::Fetch, 0).encode();
    b[4] = 2;
    assert_eq!(
        FrameHeader::decode(&b, 0),
        Err(FrameError::UnsupportedVersion {
            expected: 1,
            found: 2
        })
    );
    let mut b = header(FrameKind::Fetch, 0).encode();
    b[6] = 99;
    assert_eq!(
        FrameHeader::decode(&b, 0),
        Err(FrameError::UnknownKind { found: 99 })
    );
}

#[test]
fn refuses_lengths_above_the_bound_and_on_empty_kinds() {
    let b = header(FrameKind::Block, 1001).encode();
    assert_eq!(
        FrameHeader::decode(&b, 1000),
        Err(FrameError::TooLarge {
            max: 1000,
            found: 1001
        })
    );
    assert!(FrameHeader::decode(&b, 1001).is_ok());
    let mut b = header(FrameKind::NotFound, 0).encode();
    b[71] = 1;
    assert_eq!(
        FrameHeader::decode(&b, u64::MAX),
        Err(FrameError::UnexpectedLength {
            kind: FrameKind::NotFound,
            found: 1
        })
    );
}

#[test]
fn request_and_response_sides_refuse_each_other() {
    let req = header(FrameKind::Fetch, 0);
    let resp = header(FrameKind::Block, 10);
    assert!(matches!(
        decode_request(&resp.encode()),
        Err(FrameError::UnexpectedKind { .. })
    ));
    assert!(matches!(
        decode_response(&req.encode(), &req, 100),
        Err(FrameError::UnexpectedKind { .. })
    ));
    assert_eq!(decode_response(&resp.encode(), &req, 100), Ok(resp));
}

#[test]
fn response_for_another_block_or_namespace_is_refused() {
    let req = header(FrameKind::Fetch, 0);
    let mut other = header(FrameKind::Block, 1);
    other.id = BlockId([8; 32]);
    assert!(matches!(
        decode_response(&other.encode(), &req, 100),
        Err(FrameError::WrongBlock { .. })
    ));
    let mut other = header(FrameKind::Block, 1);
    other.namespace = NamespaceKey::derive("tenant-b");
    assert!(matches!(
        decode_response(&other.encode(), &req, 100),
        Err(FrameError::WrongNamespace { .. })
    ));
}

fn any_kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![
        Just(FrameKind::Fetch),
        Just(FrameKind::Block),
        Just(FrameKind::NotFound),
        Just(FrameKind::Unavailable),
        Just(FrameKind::Lease),
        Just(FrameKind::FetchRma),
        Just(FrameKind::Release),
        Just(FrameKind::Push),
        Just(FrameKind::Stored),
        Just(FrameKind::Rejected),
        Just(FrameKind::Probe),
        Just(FrameKind::Held),
    ]
}

proptest! {
    // The stable-toolchain stand-in for the cargo-fuzz target: arbitrary bytes never panic,
    // and whatever decodes re-encodes to the same bytes (no two encodings of one header).
    #[test]
    fn arbitrary_bytes_never_panic_and_accepted_headers_are_canonical(
        bytes in proptest::collection::vec(any::<u8>(), 0..160),
        max in any::<u64>(),
    ) {
        if let Ok(h) = FrameHeader::decode(&bytes, max) {
            prop_assert_eq!(&h.encode()[..], &bytes[..FRAME_HEADER_LEN]);
            prop_assert!(h.length <= max);
            prop_assert!(h.kind.has_payload() || h.length == 0);
        }
        if let Ok(h) = decode_request(&bytes) {
            prop_assert!(h.kind.is_request());
            prop_assert_eq!(h.length, 0);
        }
        if let Ok(h) = decode_any_request(&bytes, max) {
            prop_assert!(h.kind.is_request());
            prop_assert!(h.length <= max);
            prop_assert!(h.kind == FrameKind::Push || h.length == 0);
        }
        if let Ok(h) = FrameHeader::decode(&bytes, max) {
            if h.kind == FrameKind::Held {
                prop_assert_eq!(h.length, HELD_LENGTH);
            }
        }
        // A response decoder for a push or a probe accepts only their answers, for the block
        // and namespace asked about.
        let (ns, id) = (NamespaceKey([0x11; 32]), BlockId([0x22; 32]));
        for (request, answers) in [
            (push_header(ns, id, 64), &[FrameKind::Stored, FrameKind::Rejected, FrameKind::Unavailable][..]),
            (FrameHeader::request(FrameKind::Probe, ns, id), &[FrameKind::Held, FrameKind::NotFound, FrameKind::Unavailable][..]),
        ] {
            if let Ok(h) = decode_response(&bytes, &request, max) {
                prop_assert!(answers.contains(&h.kind));
                prop_assert_eq!((h.id, h.namespace), (id, ns));
            }
        }
    }

    #[test]
    fn encode_decode_round_trip(
        kind in any_kind(),
        id in any::<[u8; 32]>(),
        ns in any::<[u8; 32]>(),
        len in any::<u64>(),
    ) {
        let length = match kind {
            FrameKind::Block | FrameKind::Push => len,
            FrameKind::Held => HELD_LENGTH,
            FrameKind::Lease => {
                let span = (crate::lease::LEASE_DESCRIPTOR_BYTES_MAX
                    - crate::lease::LEASE_DESCRIPTOR_BYTES_MIN) as u64;
                crate::lease::LEASE_DESCRIPTOR_BYTES_MIN as u64 + len % (span + 1)
            }
            _ => 0,
        };
        let h = FrameHeader { kind, id: BlockId(id), namespace: NamespaceKey(ns), length };
        prop_assert_eq!(FrameHeader::decode(&h.encode(), u64::MAX), Ok(h));
    }

    #[test]
    fn a_flipped_bit_in_magic_version_or_kind_is_refused(
        byte in 0usize..7,
        bit in 0u8..8,
    ) {
        let mut b = header(FrameKind::Fetch, 0).encode();
        b[byte] ^= 1 << bit;
        // A flipped kind bit may land on another valid kind (Fetch = 1 flips to 0, 3, 5, 9,
        // …); none of those is a request, so a request decoder still refuses every one.
        prop_assert!(decode_request(&b).is_err());
    }
}
