//! Faults over UCX (TCP on 127.0.0.1), mirroring the QUIC fault tests where they apply: a
//! lying peer, a peer that dies mid-transfer, broken requests (to a server) and broken
//! responses (to a client), a partial request, a cancelled fetch. UCX streams have no
//! per-message end, so "the sender ended short" is indistinguishable from "the sender died":
//! both are lost connections here, never installed blocks.
//!
//! The cases that concern the fetching side run in both fetch modes (`in_both_modes!`: a
//! `stream` and a `get` test each); get mode has its own dying-server and broken-lease cases.

#![cfg(feature = "ucx")]

mod ucx_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use kvfabric_transport::conformance::sources::{test_block, FlippingSource};
use kvfabric_transport::conformance::{eventually, suite_config};
use kvfabric_transport::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN};
use kvfabric_transport::lease::{LeaseDescriptor, LEASE_DESCRIPTOR_BYTES_MAX};
use kvfabric_transport::source::SourceFuture;
use kvfabric_transport::ucx::raw::{RawClient, RawReply, RawServer};
use kvfabric_transport::{
    BlockSource, FrameError, MemorySource, SourceLookup, Transport, TransportConfig,
    TransportError, UcxMode, UcxTransport,
};
use ucx_support::{in_mode, Fabric, SHARED_MEMORY, TCP};

/// A DeepSeek-V3 BF16 block: 61 × 64 × (512 + 64) × 2 payload bytes.
const V3_PAYLOAD_BYTES: usize = 4_497_408;
/// Generous bound on anything that should be prompt (a loaded 2-core VM is slow).
const PROMPT: Duration = Duration::from_secs(5);

/// Runs `case(mode)` as two tests, `NAME::stream` and `NAME::get`.
macro_rules! in_both_modes {
    ($name:ident, $case:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stream() {
                super::$case(kvfabric_transport::UcxMode::Stream).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn get() {
                super::$case(kvfabric_transport::UcxMode::Get).await;
            }
        }
    };
}

fn ns() -> NamespaceKey {
    NamespaceKey::derive("ucx-faults")
}

async fn transport(config: TransportConfig, source: Arc<dyn BlockSource>) -> UcxTransport {
    ucx_support::bind(config, source)
        .await
        .expect("UCX transport")
}

/// The suite's config, fetching in `mode` over TCP.
fn suite_in(mode: UcxMode) -> TransportConfig {
    in_mode(mode, TCP, suite_config())
}

async fn serving(blocks: &[&VerifiedBlock]) -> UcxTransport {
    let source = MemorySource::new();
    for b in blocks {
        source.insert((*b).clone());
    }
    transport(suite_config(), Arc::new(source)).await
}

async fn client(config: TransportConfig) -> UcxTransport {
    transport(config, Arc::new(MemorySource::new())).await
}

in_both_modes!(
    one_flipped_byte_is_rejected_counted_and_the_next_owner_serves,
    flipped_byte
);

async fn flipped_byte(mode: UcxMode) {
    flipped_byte_over(mode, TCP).await;
}

/// Get mode on one host: both servers stage the block into UCX shared memory, and the client
/// reads the liar's copy out of its mapping (two threads filling and hashing the 4.5 MB
/// block), then the honest one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flipped_byte_over_shared_memory_is_rejected_counted_and_the_next_owner_serves() {
    flipped_byte_over(UcxMode::Get, SHARED_MEMORY).await;
}

async fn flipped_byte_over(mode: UcxMode, fabric: Fabric) {
    // Servers lease in place over TCP (the suite's config as it is), stage over shared memory.
    let server_config = || {
        if fabric.stage_leases {
            in_mode(mode, fabric, suite_config())
        } else {
            suite_config()
        }
    };
    let block = test_block(ns(), V3_PAYLOAD_BYTES, 1);
    let lying = MemorySource::new();
    lying.insert(block.clone());
    let liar = transport(
        server_config(),
        Arc::new(FlippingSource::new(lying, V3_PAYLOAD_BYTES / 2)),
    )
    .await;
    let honest_source = MemorySource::new();
    honest_source.insert(block.clone());
    let honest = transport(server_config(), Arc::new(honest_source)).await;
    let c = client(in_mode(mode, fabric, suite_config())).await;

    let owners = [liar.local_peer(), honest.local_peer()];
    let fetched = c
        .fetch_from_owners(&owners, ns(), block.id())
        .await
        .expect("second owner");
    assert_eq!(fetched.owner_index, 1);
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
    eventually("the liar counts the block it sent", || {
        liar.counters().blocks_served == 1
    })
    .await;
    // The verify failure consumed the whole payload: the liar's connection is still usable.
    let again = c.fetch(&liar.local_peer(), ns(), block.id()).await;
    assert!(
        matches!(again, Err(TransportError::VerifyFailed { .. })),
        "{again:?}"
    );
    assert_eq!(c.counters().connections_opened, 2, "one per peer, reused");
}

/// Announces 4 MiB, sends 1 MiB of it, then stalls (until killed).
fn dying_peer() -> RawServer {
    RawServer::start(&TransportConfig::default(), |request| {
        let header = FrameHeader {
            kind: FrameKind::Block,
            length: 4 << 20,
            ..request
        };
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(&vec![7u8; 1 << 20]);
        RawReply {
            bytes,
            then_close: false,
        }
    })
    .expect("raw server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_dying_mid_transfer_fails_the_fetch_promptly_and_nothing_is_installed() {
    let mut peer = dying_peer();
    let config = TransportConfig {
        fetch_timeout_ms: 20_000,
        ..suite_config()
    };
    let c = client(config.clone()).await;
    let target = peer.peer("dying");
    let fetch = {
        let c = c.clone();
        tokio::spawn(async move { c.fetch(&target, ns(), BlockId([5; 32])).await })
    };
    let sent = Instant::now();
    while peer.replies_sent() == 0 {
        assert!(sent.elapsed() < PROMPT, "the peer never sent its part");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let killed = Instant::now();
    peer.kill();
    let result = fetch.await.expect("fetch task");
    let took = killed.elapsed();
    assert_lost_naming(&result, "of 4194304 payload bytes");
    // The error handler noticed, not the fetch timeout (20 s).
    assert!(took < PROMPT, "took {took:?} after the kill");
    let counters = c.counters();
    assert_eq!(
        counters.fetches_ok, 0,
        "nothing partial comes out as a block"
    );
    assert_eq!(counters.timeouts, 0);
    assert!(
        counters.bytes_in > FRAME_HEADER_LEN as u64 + (512 << 10),
        "part of the payload had arrived: {}",
        counters.bytes_in
    );
    assert_eq!(counters.fetches_in_flight, 0);
}

in_both_modes!(
    after_a_peer_dies_the_next_owner_serves,
    next_owner_after_death
);

async fn next_owner_after_death(mode: UcxMode) {
    let block = test_block(ns(), 1 << 20, 9);
    let mut dead = dying_peer();
    let dead_peer = dead.peer("dead");
    dead.kill();
    let honest = serving(&[&block]).await;
    let c = client(suite_in(mode)).await;
    let owners = [dead_peer, honest.local_peer()];
    let fetched = c
        .fetch_from_owners(&owners, ns(), block.id())
        .await
        .expect("second owner");
    assert_eq!(fetched.owner_index, 1);
    assert_eq!(fetched.block.bytes(), block.bytes());
    match &fetched.failures[..] {
        [TransportError::Connect { .. } | TransportError::ConnectionLost { .. }] => {}
        other => panic!("expected one connect failure, found {other:?}"),
    }
}

in_both_modes!(
    broken_requests_close_that_endpoint_and_the_server_keeps_serving_others,
    broken_requests
);

async fn broken_requests(mode: UcxMode) {
    let block = test_block(ns(), 200_000, 3);
    let server = serving(&[&block]).await;
    let good = client(suite_in(mode)).await;
    good.fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("before");

    let valid = FrameHeader::fetch(ns(), block.id()).encode();
    let mut oversized = valid;
    oversized[71..79].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let mut trailing = valid.to_vec();
    trailing.extend_from_slice(&[0u8; 1000]);
    let wrong_kind = FrameHeader {
        kind: FrameKind::Block,
        ..FrameHeader::fetch(ns(), block.id())
    }
    .encode();
    let lease_as_request = FrameHeader {
        kind: FrameKind::Lease,
        length: 100,
        ..FrameHeader::fetch(ns(), block.id())
    }
    .encode();
    let mut release_with_length =
        FrameHeader::request(FrameKind::Release, ns(), block.id()).encode();
    release_with_length[71] = 8;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage",
            (0..FRAME_HEADER_LEN as u8)
                .map(|i| i.wrapping_mul(37))
                .collect(),
        ),
        ("oversized length", oversized.to_vec()),
        ("trailing bytes", trailing),
        ("wrong kind", wrong_kind.to_vec()),
        ("a lease as a request", lease_as_request.to_vec()),
        ("a release with a length", release_with_length.to_vec()),
    ];
    let n = cases.len() as u64;
    for (i, (name, bytes)) in cases.into_iter().enumerate() {
        let raw = RawClient::connect(&TransportConfig::default(), server.local_addr())
            .expect("raw client");
        raw.send(bytes);
        let closed = tokio::task::spawn_blocking(move || raw.wait_closed(PROMPT))
            .await
            .expect("waiter");
        assert!(
            closed.is_some(),
            "{name}: the server did not close the endpoint"
        );
        assert_eq!(
            server.counters().protocol_violations,
            i as u64 + 1,
            "{name}"
        );
        // The well-behaved client's endpoint is untouched and still served.
        let got = good
            .fetch(&server.local_peer(), ns(), block.id())
            .await
            .expect(name);
        assert_eq!(got.bytes(), block.bytes());
    }
    eventually(
        "the server counts the closed endpoints and the blocks served",
        || {
            let s = server.counters();
            s.connections_closed >= n && s.blocks_served > n
        },
    )
    .await;
    assert_eq!(
        good.counters().connections_opened,
        1,
        "the good endpoint was never dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_request_times_out_and_only_that_endpoint_closes() {
    let block = test_block(ns(), 10_000, 4);
    let source = MemorySource::new();
    source.insert(block.clone());
    let config = TransportConfig {
        request_timeout_ms: 500,
        ..suite_config()
    };
    let server = transport(config, Arc::new(source)).await;
    let good = client(suite_config()).await;
    let raw =
        RawClient::connect(&TransportConfig::default(), server.local_addr()).expect("raw client");
    raw.send(FrameHeader::fetch(ns(), block.id()).encode()[..40].to_vec());
    let started = Instant::now();
    let closed = tokio::task::spawn_blocking(move || raw.wait_closed(PROMPT))
        .await
        .expect("waiter");
    assert!(
        closed.is_some(),
        "the half-sent request was never timed out"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "closed before request_timeout_ms: {:?}",
        started.elapsed()
    );
    let s = server.counters();
    assert_eq!((s.timeouts, s.protocol_violations), (1, 0));
    let got = good
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("others are served");
    assert_eq!(got.bytes(), block.bytes());
}

/// A raw server answering every request with `respond(request)`, then (maybe) closing.
fn answering_peer(respond: fn(FrameHeader) -> RawReply) -> RawServer {
    RawServer::start(&TransportConfig::default(), respond).expect("raw server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_responses_are_refused_counted_and_close_the_connection() {
    type Respond = fn(FrameHeader) -> RawReply;
    type Check = fn(&FrameError) -> bool;
    let cases: [(&str, Respond, Check); 3] = [
        (
            "garbage",
            |_| RawReply {
                bytes: vec![0xAB; 100],
                then_close: false,
            },
            |e| matches!(e, FrameError::BadMagic { .. }),
        ),
        (
            "oversized length",
            |r| RawReply {
                bytes: FrameHeader {
                    kind: FrameKind::Block,
                    length: 1 << 40,
                    ..r
                }
                .encode()
                .to_vec(),
                then_close: false,
            },
            |e| matches!(e, FrameError::TooLarge { found, .. } if *found == 1 << 40),
        ),
        (
            "another block",
            |r| RawReply {
                bytes: FrameHeader {
                    kind: FrameKind::NotFound,
                    id: BlockId([0xcc; 32]),
                    ..r
                }
                .encode()
                .to_vec(),
                then_close: false,
            },
            |e| matches!(e, FrameError::WrongBlock { .. }),
        ),
    ];
    let c = client(suite_config()).await;
    for (i, (name, respond, check)) in cases.into_iter().enumerate() {
        let peer = answering_peer(respond);
        match c.fetch(&peer.peer("raw"), ns(), BlockId([1; 32])).await {
            Err(TransportError::Protocol { error, .. }) => {
                assert!(check(&error), "{name}: {error}")
            }
            other => panic!("{name}: expected a protocol error, found {other:?}"),
        }
        let counters = c.counters();
        assert_eq!(counters.protocol_violations, i as u64 + 1, "{name}");
        assert_eq!(counters.connections_closed, i as u64 + 1, "{name}: closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_cut_short_by_its_sender_is_lost_not_installed() {
    let peer = answering_peer(|r| {
        let mut bytes = FrameHeader {
            kind: FrameKind::Block,
            length: 10_000,
            ..r
        }
        .encode()
        .to_vec();
        bytes.extend_from_slice(&[1u8; 4_000]);
        RawReply {
            bytes,
            then_close: true,
        }
    });
    let c = client(suite_config()).await;
    // How many of the 4,000 bytes arrive before the reset depends on the kernel (a reset
    // may discard unread data) and on which UCX callback runs first; never all 10,000.
    assert_lost_naming(
        &c.fetch(&peer.peer("raw"), ns(), BlockId([1; 32])).await,
        " of 10000 payload bytes",
    );
    let counters = c.counters();
    assert_eq!(counters.fetches_ok, 0);
    assert!(counters.bytes_in <= (FRAME_HEADER_LEN + 4_000) as u64);
}

/// Serves `fast`; never answers for anything else.
struct HalfStalling {
    fast: MemorySource,
    fast_id: BlockId,
}

impl BlockSource for HalfStalling {
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        if id == self.fast_id {
            return self.fast.lookup(namespace, id);
        }
        Box::pin(std::future::pending::<SourceLookup>())
    }
}

in_both_modes!(
    a_cancelled_fetch_closes_its_endpoint_and_the_next_fetch_reconnects,
    cancelled_fetch
);

async fn cancelled_fetch(mode: UcxMode) {
    let block = test_block(ns(), 300_000, 6);
    let fast = MemorySource::new();
    fast.insert(block.clone());
    let server = transport(
        suite_config(),
        Arc::new(HalfStalling {
            fast,
            fast_id: block.id(),
        }),
    )
    .await;
    let c = client(suite_in(mode)).await;
    let peer = server.local_peer();
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        c.fetch(&peer, ns(), BlockId([8; 32])),
    )
    .await;
    assert!(dropped.is_err(), "the stalled fetch cannot finish");
    eventually("the cancelled fetch's endpoint is closed", || {
        c.counters().connections_closed == 1
    })
    .await;
    let got = c.fetch(&peer, ns(), block.id()).await.expect("reconnects");
    assert_eq!(got.bytes(), block.bytes());
    let counters = c.counters();
    assert_eq!(counters.connections_opened, 2);
    assert_eq!(counters.fetches_in_flight, 0);
    eventually("the server abandons the stalled lookup's endpoint", || {
        server.counters().connections_closed == 1
    })
    .await;
}

in_both_modes!(
    pipelined_fetches_share_one_endpoint_and_come_back_in_order,
    pipelined
);

async fn pipelined(mode: UcxMode) {
    let blocks: Vec<_> = (0..24)
        .map(|i| test_block(ns(), 100_000 + i * 4099, 50 + i as u64))
        .collect();
    let refs: Vec<&VerifiedBlock> = blocks.iter().collect();
    let server = serving(&refs).await;
    let config = TransportConfig {
        fetches_in_flight_max: 8,
        ..suite_in(mode)
    };
    let c = client(config).await;
    let ids: Vec<BlockId> = blocks.iter().map(|b| b.id()).collect();
    let results = c.fetch_many(&server.local_peer(), ns(), &ids).await;
    for (b, r) in blocks.iter().zip(&results) {
        assert_eq!(r.as_ref().expect("fetched").bytes(), b.bytes());
    }
    let counters = c.counters();
    assert_eq!(counters.connections_opened, 1);
    assert!(counters.fetches_in_flight_peak > 1, "fetches overlapped");
    assert!(counters.fetches_in_flight_peak <= 8);
    eventually("the server served all 24", || {
        server.counters().blocks_served == 24
    })
    .await;
    if mode == UcxMode::Get {
        eventually("every lease was released", || {
            let s = server.counters();
            s.leases_granted == 24 && s.leases_held == 0
        })
        .await;
    }
}

/// A server that leases a 32 MiB block dies (closes abruptly) while a get-mode client reads it
/// 4 KiB at a time: the fetch fails promptly, typed, and nothing partial is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dying_mid_read_fails_the_get_promptly_and_nothing_is_installed() {
    let block = test_block(ns(), 32 << 20, 11);
    let server = serving(&[&block]).await;
    let mut config = TransportConfig {
        fetch_timeout_ms: 20_000,
        ..suite_in(UcxMode::Get)
    };
    config.ucx.recv_chunk_bytes = 4 << 10;
    config.ucx.recv_chunks_posted = 1;
    let c = client(config).await;
    let fetch = {
        let (c, peer, id) = (c.clone(), server.local_peer(), block.id());
        tokio::spawn(async move { c.fetch(&peer, ns(), id).await })
    };
    let started = Instant::now();
    while c.counters().bytes_in < 1 << 20 {
        assert!(started.elapsed() < PROMPT, "the read never got going");
        assert!(
            !fetch.is_finished(),
            "the read finished before the server died"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killed = Instant::now();
    server.close().await;
    let result = fetch.await.expect("fetch task");
    let took = killed.elapsed();
    assert_lost_naming(&result, "bytes read one-sided");
    assert!(took < PROMPT, "took {took:?} after the server died");
    let counters = c.counters();
    assert_eq!(
        counters.fetches_ok, 0,
        "nothing partial comes out as a block"
    );
    assert_eq!((counters.timeouts, counters.fetches_in_flight), (0, 0));
    assert!(counters.bytes_in < block.bytes().len() as u64);
}

/// Broken answers to a `FetchRma`: each is refused with its error, counted, and closes the
/// connection; nothing is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_leases_are_refused_counted_and_close_the_connection() {
    type Respond = fn(FrameHeader) -> RawReply;
    type Check = fn(&FrameError) -> bool;
    fn lease(r: FrameHeader, descriptor: Vec<u8>) -> RawReply {
        let mut bytes = FrameHeader {
            kind: FrameKind::Lease,
            length: descriptor.len() as u64,
            ..r
        }
        .encode()
        .to_vec();
        bytes.extend_from_slice(&descriptor);
        RawReply {
            bytes,
            then_close: false,
        }
    }
    let cases: [(&str, Respond, Check); 4] = [
        (
            "a block where a lease belongs",
            |r| RawReply {
                bytes: FrameHeader {
                    kind: FrameKind::Block,
                    length: 10,
                    ..r
                }
                .encode()
                .to_vec(),
                then_close: false,
            },
            |e| {
                matches!(
                    e,
                    FrameError::UnexpectedKind {
                        found: FrameKind::Block,
                        ..
                    }
                )
            },
        ),
        (
            "an oversized descriptor",
            |r| RawReply {
                bytes: FrameHeader {
                    kind: FrameKind::Lease,
                    length: LEASE_DESCRIPTOR_BYTES_MAX as u64 + 1,
                    ..r
                }
                .encode()
                .to_vec(),
                then_close: false,
            },
            |e| matches!(e, FrameError::BadLeaseLength { .. }),
        ),
        (
            "a descriptor whose parts do not add up",
            |r| lease(r, vec![0; 40]),
            |e| matches!(e, FrameError::BadLease(_)),
        ),
        (
            "a leased block above max_frame_bytes",
            |r| {
                let d = LeaseDescriptor {
                    block_len: 1 << 40,
                    remote_addr: 0x1000,
                    rkey: vec![1; 16],
                    worker_address: vec![2; 16],
                };
                lease(r, d.encode())
            },
            |e| matches!(e, FrameError::TooLarge { found, .. } if *found == 1 << 40),
        ),
    ];
    let c = client(suite_in(UcxMode::Get)).await;
    for (i, (name, respond, check)) in cases.into_iter().enumerate() {
        let peer = answering_peer(respond);
        match c.fetch(&peer.peer("raw"), ns(), BlockId([1; 32])).await {
            Err(TransportError::Protocol { error, .. }) => {
                assert!(check(&error), "{name}: {error}")
            }
            other => panic!("{name}: expected a protocol error, found {other:?}"),
        }
        let counters = c.counters();
        assert_eq!(counters.protocol_violations, i as u64 + 1, "{name}");
        assert_eq!(counters.connections_closed, i as u64 + 1, "{name}: closed");
        assert_eq!(counters.fetches_ok, 0, "{name}");
    }
}

/// `result` is a lost connection whose reason names `part` (how much had arrived).
fn assert_lost_naming(result: &Result<VerifiedBlock, TransportError>, part: &str) {
    match result {
        Err(TransportError::ConnectionLost { reason, .. }) => {
            assert!(reason.contains(part), "{reason}");
        }
        other => panic!("expected a lost connection, found {other:?}"),
    }
}
