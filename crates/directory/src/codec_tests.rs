//! Property tests of the frame codec: round trips, and refusal of oversized, truncated,
//! corrupted and garbage frames (never a panic).

use kvfabric_store::{BlockId, Tier};
use proptest::prelude::*;

use super::*;
use crate::command::{Command, OwnershipBatch, Request, RequestId};
use crate::ids::{ChunkKey, Epoch, NodeId};
use crate::rpc::{ForwardRequest, RpcRequest};

const MAX: usize = 1 << 20;

fn arb_tier() -> impl Strategy<Value = Tier> {
    prop_oneof![Just(Tier::Gpu), Just(Tier::Host), Just(Tier::Disk)]
}

fn arb_command() -> impl Strategy<Value = Command> {
    let batch = (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec((any::<[u8; 32]>(), arb_tier()), 0..20),
        prop::collection::vec((any::<[u8; 32]>(), arb_tier()), 0..20),
        prop::collection::vec((any::<[u8; 32]>(), any::<[u8; 32]>()), 0..20),
    )
        .prop_map(|(n, e, c, r, ch)| {
            Command::Ownership(OwnershipBatch {
                node: NodeId(n),
                epoch: Epoch(e),
                claims: c.into_iter().map(|(b, t)| (BlockId(b), t)).collect(),
                releases: r.into_iter().map(|(b, t)| (BlockId(b), t)).collect(),
                chunks: ch
                    .into_iter()
                    .map(|(k, b)| (ChunkKey(k), BlockId(b)))
                    .collect(),
            })
        });
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(n, u)| Command::Join {
            node: NodeId(n),
            until_ms: u
        }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(n, e, u)| Command::RenewLease {
            node: NodeId(n),
            epoch: Epoch(e),
            until_ms: u
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(now_ms, keep_chunks_ms)| {
            Command::ExpireLeases {
                now_ms,
                keep_chunks_ms,
            }
        }),
        batch,
    ]
}

fn request(c: Command) -> RpcRequest {
    RpcRequest::Forward(ForwardRequest::Write(Request {
        id: RequestId { client: 7, seq: 9 },
        command: c,
    }))
}

fn command_of(r: RpcRequest) -> Command {
    match r {
        RpcRequest::Forward(ForwardRequest::Write(r)) => r.command,
        other => panic!("expected a forwarded write, found {}", other.kind()),
    }
}

proptest! {
    #[test]
    fn frames_round_trip(c in arb_command()) {
        let frame = request(c.clone()).encode(MAX).unwrap();
        let back = RpcRequest::decode(&frame, MAX).unwrap();
        prop_assert_eq!(command_of(back), c);
    }

    #[test]
    fn oversized_frames_are_refused_both_ways(c in arb_command()) {
        let frame = request(c.clone()).encode(MAX).unwrap();
        let small = frame.len() - 1;
        let on_encode = request(c).encode(small);
        prop_assert!(
            matches!(on_encode, Err(DirectoryError::FrameTooLarge { limit, found }) if limit == small && found == frame.len()),
            "encode under {} bytes gave {:?}", small, on_encode.map(|f| f.len())
        );
        let on_decode = RpcRequest::decode(&frame, small);
        prop_assert!(
            matches!(on_decode, Err(DirectoryError::FrameTooLarge { limit, found }) if limit == small && found == frame.len()),
            "decode under {} bytes accepted", small
        );
    }

    #[test]
    fn corrupted_or_truncated_frames_are_refused(c in arb_command(), at in any::<prop::sample::Index>(), bit in 0u8..8, cut in any::<prop::sample::Index>()) {
        let frame = request(c).encode(MAX).unwrap();
        let mut bad = frame.clone();
        let i = at.index(bad.len());
        bad[i] ^= 1 << bit;
        prop_assert!(RpcRequest::decode(&bad, MAX).is_err(), "flip at {} accepted", i);
        let n = cut.index(frame.len());
        prop_assert!(RpcRequest::decode(&frame[..n], MAX).is_err(), "cut at {} accepted", n);
    }

    #[test]
    fn garbage_never_decodes_or_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(RpcRequest::decode(&bytes, MAX).is_err());
        prop_assert!(crate::rpc::RpcResponse::decode(&bytes, MAX).is_err());
    }

    #[test]
    fn valid_header_with_garbage_body_is_refused(body in prop::collection::vec(any::<u8>(), 0..256)) {
        // A well-formed header with the right checksum over random bytes: only bincode stands
        // between it and a message, and it must refuse (or the bytes happen to decode, in which
        // case the frame really is one).
        let mut frame = Vec::new();
        frame.extend_from_slice(&FRAME_MAGIC);
        frame.extend_from_slice(&FRAME_VERSION.to_le_bytes());
        frame.push(FrameKind::Request as u8);
        frame.push(0);
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&blake3::hash(&body).as_bytes()[..8]);
        frame.extend_from_slice(&body);
        if let Ok(msg) = RpcRequest::decode(&frame, MAX) {
            let again = msg.encode(MAX).unwrap();
            prop_assert_eq!(again, frame);
        }
    }
}

#[test]
fn declared_length_is_checked_before_reading_the_body() {
    let mut header = vec![0u8; FRAME_HEADER_LEN];
    header[..4].copy_from_slice(&FRAME_MAGIC);
    header[4..6].copy_from_slice(&FRAME_VERSION.to_le_bytes());
    header[6] = FrameKind::Request as u8;
    header[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut reader: &[u8] = &header;
    let r = rt.block_on(read_frame(&mut reader, FrameKind::Request, MAX));
    assert!(
        matches!(r, Err(DirectoryError::FrameTooLarge { limit: MAX, .. })),
        "{r:?}"
    );
}

#[test]
fn stream_round_trip() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let frame = request(Command::ExpireLeases {
        now_ms: 7,
        keep_chunks_ms: 10,
    })
    .encode(MAX)
    .unwrap();
    let mut buf = Vec::new();
    rt.block_on(write_frame(&mut buf, &frame)).unwrap();
    buf.extend_from_slice(&frame);
    let mut reader: &[u8] = &buf;
    for _ in 0..2 {
        let got = rt
            .block_on(read_frame(&mut reader, FrameKind::Request, MAX))
            .unwrap();
        assert_eq!(got, frame);
    }
    assert!(rt
        .block_on(read_frame(&mut reader, FrameKind::Request, MAX))
        .is_err());
}
