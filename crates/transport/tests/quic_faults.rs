//! Faults with real quinn endpoints on 127.0.0.1: a lying peer, a peer that dies mid-transfer,
//! and peers that send broken frames (to a server and to a client).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{raw_connect, read_request, QuicFactory, RawPeer};
use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use kvfabric_transport::conformance::sources::{test_block, FlippingSource};
use kvfabric_transport::conformance::{eventually, suite_config, TransportFactory};
use kvfabric_transport::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN};
use kvfabric_transport::quic::errors::CLOSE_PROTOCOL_VIOLATION;
use kvfabric_transport::{
    FrameError, MemorySource, QuicTransport, Transport, TransportConfig, TransportError,
};

/// A DeepSeek-V3 BF16 block: 61 × 64 × (512 + 64) × 2 payload bytes.
const V3_PAYLOAD_BYTES: usize = 4_497_408;

fn ns() -> NamespaceKey {
    NamespaceKey::derive("faults")
}

async fn serving(f: &QuicFactory, blocks: &[&VerifiedBlock]) -> QuicTransport {
    let source = MemorySource::new();
    for b in blocks {
        source.insert((*b).clone());
    }
    f.build(suite_config(), Arc::new(source))
        .await
        .expect("server")
}

async fn client(f: &QuicFactory, config: TransportConfig) -> QuicTransport {
    f.build(config, Arc::new(MemorySource::new()))
        .await
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flipped_byte_is_rejected_counted_and_the_next_owner_serves() {
    let f = QuicFactory::new();
    let block = test_block(ns(), V3_PAYLOAD_BYTES, 1);
    let lying = MemorySource::new();
    lying.insert(block.clone());
    let liar = f
        .build(
            suite_config(),
            Arc::new(FlippingSource::new(lying, V3_PAYLOAD_BYTES / 2)),
        )
        .await
        .expect("liar");
    let honest = serving(&f, &[&block]).await;
    let c = client(&f, suite_config()).await;

    let owners = [liar.local_peer(), honest.local_peer()];
    let fetched = c
        .fetch_from_owners(&owners, ns(), block.id())
        .await
        .expect("second owner");
    assert_eq!(fetched.owner_index, 1);
    assert_eq!(fetched.block.id(), block.id());
    assert_eq!(fetched.block.bytes(), block.bytes());
    match &fetched.failures[..] {
        [TransportError::VerifyFailed {
            peer,
            expected,
            found,
        }] => {
            assert_eq!(peer, &liar.local_peer());
            assert_eq!(*expected, block.id());
            assert_ne!(found, expected);
        }
        other => panic!("expected one verify failure, found {other:?}"),
    }
    let counters = c.counters();
    assert_eq!(counters.verify_failures, 1);
    assert_eq!((counters.fetches_ok, counters.fetches_failed), (1, 1));
    eventually("the liar counts the bytes it sent", || {
        liar.counters().blocks_served == 1
    })
    .await;
}

/// A peer that announces 4 MiB, sends 1 MiB and then vanishes (no close frame).
fn dying_peer(f: &QuicFactory, sent: tokio::sync::mpsc::Sender<()>) -> RawPeer {
    let identity = f.ca.issue(&f.next_name()).expect("identity");
    RawPeer::start(&identity, move |_conn, mut send, mut recv| {
        let sent = sent.clone();
        async move {
            let request = read_request(&mut recv).await;
            let header = FrameHeader {
                kind: FrameKind::Block,
                length: 4 << 20,
                ..request
            };
            send.write_all(&header.encode()).await.ok();
            send.write_all(&vec![7u8; 1 << 20]).await.ok();
            sent.send(()).await.ok();
            std::future::pending::<()>().await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_dying_mid_transfer_is_an_error_within_the_timeout_and_nothing_is_installed() {
    let f = QuicFactory::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let mut peer = dying_peer(&f, tx);
    let config = TransportConfig {
        fetch_timeout_ms: 1_500,
        connect_timeout_ms: 1_000,
        ..suite_config()
    };
    let c = client(&f, config.clone()).await;
    let target = peer.peer.clone();
    let started = Instant::now();
    let fetch = {
        let c = c.clone();
        tokio::spawn(async move { c.fetch(&target, ns(), BlockId([5; 32])).await })
    };
    rx.recv().await.expect("the peer sent part of the block");
    tokio::time::sleep(Duration::from_millis(50)).await;
    peer.kill();
    let result = fetch.await.expect("fetch task");
    let took = started.elapsed();
    match result {
        Err(TransportError::Timeout { .. } | TransportError::ConnectionLost { .. }) => {}
        other => panic!("expected a timeout or a lost connection, found {other:?}"),
    }
    assert!(
        took < Duration::from_millis(config.fetch_timeout_ms + 1_000),
        "took {took:?}"
    );
    let counters = c.counters();
    assert_eq!(
        counters.fetches_ok, 0,
        "nothing partial may come out as a block"
    );
    assert!(
        counters.bytes_in > FRAME_HEADER_LEN as u64,
        "part of the payload had arrived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_peer_dies_the_next_owner_serves() {
    let f = QuicFactory::new();
    let block = test_block(ns(), 1 << 20, 9);
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let mut dead = dying_peer(&f, tx);
    dead.kill();
    let honest = serving(&f, &[&block]).await;
    let config = TransportConfig {
        fetch_timeout_ms: 1_000,
        connect_timeout_ms: 1_000,
        ..suite_config()
    };
    let c = client(&f, config).await;
    let owners = [dead.peer.clone(), honest.local_peer()];
    let fetched = c
        .fetch_from_owners(&owners, ns(), block.id())
        .await
        .expect("second owner");
    assert_eq!(fetched.owner_index, 1);
    assert_eq!(fetched.block.bytes(), block.bytes());
    assert_eq!(fetched.failures.len(), 1);
}

/// Sends `bytes` as a request on a fresh connection; returns how the server closed it.
async fn send_broken_request(
    f: &QuicFactory,
    server: &QuicTransport,
    bytes: Vec<u8>,
) -> quinn::ConnectionError {
    let identity = f.ca.issue(&f.next_name()).expect("identity");
    let conn = raw_connect(&identity, &server.local_peer()).await;
    let (mut send, _recv) = conn.open_bi().await.expect("stream");
    send.write_all(&bytes).await.ok();
    send.finish().ok();
    tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("server closes it")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_requests_close_that_connection_and_the_server_keeps_serving_others() {
    let f = QuicFactory::new();
    let block = test_block(ns(), 200_000, 3);
    let server = serving(&f, &[&block]).await;
    let good = client(&f, suite_config()).await;
    good.fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("before");

    let valid = FrameHeader::fetch(ns(), block.id()).encode();
    let mut oversized = FrameHeader::fetch(ns(), block.id()).encode();
    oversized[71..79].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let mut trailing = valid.to_vec();
    trailing.extend_from_slice(&[0u8; 1000]);
    let wrong_kind = FrameHeader {
        kind: FrameKind::Block,
        ..FrameHeader::fetch(ns(), block.id())
    }
    .encode();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage",
            (0..FRAME_HEADER_LEN as u8)
                .map(|i| i.wrapping_mul(37))
                .collect(),
        ),
        ("truncated", valid[..40].to_vec()),
        ("oversized length", oversized.to_vec()),
        ("trailing bytes", trailing),
        ("wrong kind", wrong_kind.to_vec()),
    ];
    for (i, (name, bytes)) in cases.into_iter().enumerate() {
        match send_broken_request(&f, &server, bytes).await {
            quinn::ConnectionError::ApplicationClosed(close) => {
                assert_eq!(close.error_code, CLOSE_PROTOCOL_VIOLATION, "{name}");
            }
            other => panic!("{name}: expected a protocol-violation close, found {other}"),
        }
        assert_eq!(
            server.counters().protocol_violations,
            i as u64 + 1,
            "{name}"
        );
        // The well-behaved client's connection is untouched and still served.
        let got = good
            .fetch(&server.local_peer(), ns(), block.id())
            .await
            .expect(name);
        assert_eq!(got.bytes(), block.bytes());
    }
    eventually(
        "the server counts 5 closed connections and 6 blocks served",
        || {
            let s = server.counters();
            s.connections_closed >= 5 && s.blocks_served == 6
        },
    )
    .await;
    assert_eq!(
        good.counters().connections_opened,
        1,
        "the good connection was never dropped"
    );
}

/// A raw server that answers every request with `respond(request)` as raw bytes.
fn answering_peer(f: &QuicFactory, respond: fn(FrameHeader) -> Vec<u8>) -> RawPeer {
    let identity = f.ca.issue(&f.next_name()).expect("identity");
    RawPeer::start(&identity, move |_conn, mut send, mut recv| async move {
        let request = read_request(&mut recv).await;
        send.write_chunk(Bytes::from(respond(request))).await.ok();
        send.finish().ok();
        std::future::pending::<()>().await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_responses_are_refused_counted_and_close_the_connection() {
    let f = QuicFactory::new();
    type Respond = fn(FrameHeader) -> Vec<u8>;
    type Check = fn(&FrameError) -> bool;
    let cases: [(&str, Respond, Check); 4] = [
        (
            "garbage",
            |_| vec![0xAB; 100],
            |e| matches!(e, FrameError::BadMagic { .. }),
        ),
        (
            "truncated header",
            |r| r.encode()[..30].to_vec(),
            |e| matches!(e, FrameError::Truncated { found: 30, .. }),
        ),
        (
            "oversized length",
            |r| {
                FrameHeader {
                    kind: FrameKind::Block,
                    length: 1 << 40,
                    ..r
                }
                .encode()
                .to_vec()
            },
            |e| matches!(e, FrameError::TooLarge { found, .. } if *found == 1 << 40),
        ),
        (
            "another block",
            |r| {
                FrameHeader {
                    kind: FrameKind::NotFound,
                    id: BlockId([0xcc; 32]),
                    ..r
                }
                .encode()
                .to_vec()
            },
            |e| matches!(e, FrameError::WrongBlock { .. }),
        ),
    ];
    let c = client(&f, suite_config()).await;
    for (i, (name, respond, check)) in cases.into_iter().enumerate() {
        let peer = answering_peer(&f, respond);
        match c.fetch(&peer.peer, ns(), BlockId([1; 32])).await {
            Err(TransportError::Protocol { error, .. }) => {
                assert!(check(&error), "{name}: {error}")
            }
            other => panic!("{name}: expected a protocol error, found {other:?}"),
        }
        assert_eq!(c.counters().protocol_violations, i as u64 + 1, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_cut_short_by_its_sender_is_truncated_not_installed() {
    let f = QuicFactory::new();
    let peer = answering_peer(&f, |r| {
        let mut out = FrameHeader {
            kind: FrameKind::Block,
            length: 10_000,
            ..r
        }
        .encode()
        .to_vec();
        out.extend_from_slice(&[1u8; 4_000]);
        out
    });
    let c = client(&f, suite_config()).await;
    match c.fetch(&peer.peer, ns(), BlockId([1; 32])).await {
        Err(TransportError::Truncated {
            expected, found, ..
        }) => assert_eq!((expected, found), (10_000, 4_000)),
        other => panic!("expected a truncated block, found {other:?}"),
    }
    assert_eq!(c.counters().protocol_violations, 1);
    assert_eq!(c.counters().fetches_ok, 0);
}
