//! The conformance suite every [`Transport`] implementation runs (QUIC in `tests/`, UCX and
//! RDMA behind their features), in the manner of a storage conformance suite: one factory,
//! many cases, each announced as a phase and each asserting behaviour, not timing.
//!
//! Cases: a single fetch returns the bytes and the id; many fetches return each block in
//! order; not-found is a typed error well before the timeout; a verification failure falls
//! back to the next owner and is counted; an oversized frame is refused; a stalled peer ends
//! in a timeout; the in-flight bound holds; one connection per peer is reused; owner lists
//! that are empty or all bad give typed errors; a pushed block is stored by its peer and found
//! there, a refused push and a silent probe are typed ([`push`]). Transports that carry
//! message channels also run [`messages::run`].

pub mod messages;
pub mod push;
pub mod sources;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_store::{BlockId, NamespaceKey};

use crate::config::TransportConfig;
use crate::error::TransportError;
use crate::frame::FrameError;
use crate::source::{BlockSource, MemorySource};
use crate::transport::{Transport, TransportFuture};

use push::{a_refused_push_and_a_silent_probe_are_typed, push_then_probe_then_fetch};
use sources::{test_block, FlippingSource, SlowCountingSource, StallingSource};

/// Builds instances of one transport implementation for the suite.
pub trait TransportFactory: Send + Sync {
    /// The implementation under test.
    type T: Transport + 'static;

    /// A new instance on a loopback address, serving `source`, with `config`.
    fn build(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
    ) -> TransportFuture<'_, Result<Self::T, TransportError>>;
}

/// The suite's config: defaults with short timeouts so failing cases end quickly.
pub fn suite_config() -> TransportConfig {
    TransportConfig {
        connect_timeout_ms: 2_000,
        fetch_timeout_ms: 3_000,
        request_timeout_ms: 2_000,
        idle_timeout_ms: 10_000,
        keep_alive_ms: 2_000,
        ..TransportConfig::default()
    }
}

pub(crate) const BLOCK_PAYLOAD_BYTES: usize = 300_000;

/// Bound on waiting for the other side's counters to catch up (see [`eventually`]).
pub const EVENTUALLY_MS_MAX: u64 = 5_000;

/// Waits until `check` holds, polling, for at most [`EVENTUALLY_MS_MAX`]; panics naming
/// `what` if it never does. For counters kept by the other side of a connection, which that
/// side's task updates on its own schedule, after the bytes it sent have already arrived.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_millis(EVENTUALLY_MS_MAX);
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: still false after {EVENTUALLY_MS_MAX} ms"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) fn ns() -> NamespaceKey {
    NamespaceKey::derive("conformance")
}

pub(crate) async fn build<F: TransportFactory>(
    f: &F,
    config: TransportConfig,
    source: Arc<dyn BlockSource>,
) -> F::T {
    f.build(config, source)
        .await
        .expect("factory builds a transport")
}

/// Runs every case in order; panics (naming the case) on the first failure.
pub async fn run<F: TransportFactory>(factory: &F) {
    macro_rules! case {
        ($name:literal, $case:ident) => {
            tracing::info!(case = $name, "conformance: start");
            $case(factory).await;
            tracing::info!(case = $name, "conformance: passed");
        };
    }
    case!("single fetch", single_fetch);
    case!("many fetches", many_fetches);
    case!("not found", not_found_is_typed_and_quick);
    case!("verify failure", verify_failure_falls_back);
    case!("oversized", oversized_frame_is_refused);
    case!("timeout", stalled_peer_times_out);
    case!("in-flight bound", in_flight_bound_holds);
    case!("owner lists", owner_lists);
    case!("push, probe, fetch", push_then_probe_then_fetch);
    case!(
        "refused push, silent probe",
        a_refused_push_and_a_silent_probe_are_typed
    );
}

/// One block, fetched: same bytes, same id, counted; one connection.
pub async fn single_fetch<F: TransportFactory>(f: &F) {
    let block = test_block(ns(), BLOCK_PAYLOAD_BYTES, 1);
    let source = MemorySource::new();
    source.insert(block.clone());
    let server = build(f, suite_config(), Arc::new(source)).await;
    let client = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let got = client
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("fetch");
    assert_eq!(got.id(), block.id());
    assert_eq!(got.bytes(), block.bytes());
    let c = client.counters();
    assert_eq!(
        (c.fetches_ok, c.fetches_failed, c.verify_failures),
        (1, 0, 0)
    );
    assert!(c.bytes_in >= block.bytes().len() as u64);
    let len = block.bytes().len() as u64;
    eventually("server counts the block served", || {
        let s = server.counters();
        s.blocks_served == 1 && s.bytes_out >= len
    })
    .await;
    client.close().await;
    server.close().await;
}

/// Several ids from one peer: each result in order, a missing one typed, one connection.
pub async fn many_fetches<F: TransportFactory>(f: &F) {
    let blocks: Vec<_> = (0..6)
        .map(|i| test_block(ns(), BLOCK_PAYLOAD_BYTES + i * 1000, 10 + i as u64))
        .collect();
    let source = MemorySource::new();
    for b in &blocks {
        source.insert(b.clone());
    }
    let server = build(f, suite_config(), Arc::new(source)).await;
    let client = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let missing = BlockId([0xee; 32]);
    let mut ids: Vec<BlockId> = blocks.iter().map(|b| b.id()).collect();
    ids.insert(3, missing);
    let results = client.fetch_many(&server.local_peer(), ns(), &ids).await;
    assert_eq!(results.len(), ids.len());
    for (id, r) in ids.iter().zip(&results) {
        match r {
            Ok(b) => {
                assert_eq!(b.id(), *id);
                let want = blocks.iter().find(|x| x.id() == *id).expect("known block");
                assert_eq!(b.bytes(), want.bytes());
            }
            Err(TransportError::NotFound { id: nf, .. }) => assert_eq!(*nf, missing),
            Err(e) => panic!("block {id}: unexpected error {e}"),
        }
    }
    assert!(matches!(results[3], Err(TransportError::NotFound { .. })));
    let c = client.counters();
    assert_eq!((c.fetches_ok, c.fetches_failed), (6, 1));
    assert_eq!(c.connections_opened, 1, "one connection per peer, reused");
    client.close().await;
    server.close().await;
}

/// Not-found is a typed error, long before the fetch timeout.
pub async fn not_found_is_typed_and_quick<F: TransportFactory>(f: &F) {
    let server = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let client = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let started = Instant::now();
    let err = client
        .fetch(&server.local_peer(), ns(), BlockId([1; 32]))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::NotFound { .. }), "{err}");
    let bound = Duration::from_millis(suite_config().fetch_timeout_ms / 2);
    assert!(
        started.elapsed() < bound,
        "not-found took {:?}",
        started.elapsed()
    );
    eventually("server counts the not-found", || {
        server.counters().not_found_served == 1
    })
    .await;
    client.close().await;
    server.close().await;
}

/// A lying owner first: rejected, counted, and the next owner serves.
pub async fn verify_failure_falls_back<F: TransportFactory>(f: &F) {
    let block = test_block(ns(), BLOCK_PAYLOAD_BYTES, 2);
    let (honest, lying) = (MemorySource::new(), MemorySource::new());
    honest.insert(block.clone());
    lying.insert(block.clone());
    let liar = build(
        f,
        suite_config(),
        Arc::new(FlippingSource::new(lying, 1000)),
    )
    .await;
    let good = build(f, suite_config(), Arc::new(honest)).await;
    let client = build(f, suite_config(), Arc::new(MemorySource::new())).await;

    let err = client
        .fetch(&liar.local_peer(), ns(), block.id())
        .await
        .unwrap_err();
    assert!(err.is_verify_failure(), "{err}");
    assert_eq!(client.counters().verify_failures, 1);

    let owners = [liar.local_peer(), good.local_peer()];
    let fetched = client
        .fetch_from_owners(&owners, ns(), block.id())
        .await
        .expect("fallback");
    assert_eq!(fetched.owner_index, 1);
    assert_eq!(fetched.owner, good.local_peer());
    assert_eq!(fetched.block.bytes(), block.bytes());
    assert_eq!(fetched.failures.len(), 1);
    assert!(fetched.failures[0].is_verify_failure());
    assert_eq!(client.counters().verify_failures, 2);
    for t in [client, liar, good] {
        t.close().await;
    }
}

/// A frame above the receiver's `max_frame_bytes` is refused as a protocol violation; a block
/// above the server's own bound is answered as unavailable.
pub async fn oversized_frame_is_refused<F: TransportFactory>(f: &F) {
    let block = test_block(ns(), BLOCK_PAYLOAD_BYTES, 3);
    let source = MemorySource::new();
    source.insert(block.clone());
    let server = build(f, suite_config(), Arc::new(source)).await;
    let small = TransportConfig {
        max_frame_bytes: BLOCK_PAYLOAD_BYTES as u64 / 2,
        ..suite_config()
    };
    let client = build(f, small.clone(), Arc::new(MemorySource::new())).await;
    match client.fetch(&server.local_peer(), ns(), block.id()).await {
        Err(TransportError::Protocol { error, .. }) => match *error {
            FrameError::TooLarge { max, found } => {
                assert_eq!(max, small.max_frame_bytes);
                assert_eq!(found, block.bytes().len() as u64);
            }
            other => panic!("expected a too-large frame error, found {other}"),
        },
        other => panic!("expected a too-large frame error, found {other:?}"),
    }
    assert_eq!(client.counters().protocol_violations, 1);

    let source = MemorySource::new();
    source.insert(block.clone());
    let small_server = build(f, small, Arc::new(source)).await;
    let client2 = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let err = client2
        .fetch(&small_server.local_peer(), ns(), block.id())
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Unavailable { .. }), "{err}");
    for t in [client, server, small_server, client2] {
        t.close().await;
    }
}

/// A peer that never answers: a typed timeout, at the configured bound, not before.
pub async fn stalled_peer_times_out<F: TransportFactory>(f: &F) {
    let config = TransportConfig {
        fetch_timeout_ms: 800,
        connect_timeout_ms: 800,
        ..suite_config()
    };
    let server = build(f, suite_config(), Arc::new(StallingSource)).await;
    let client = build(f, config.clone(), Arc::new(MemorySource::new())).await;
    let started = Instant::now();
    let err = client
        .fetch(&server.local_peer(), ns(), BlockId([2; 32]))
        .await
        .unwrap_err();
    let took = started.elapsed();
    match err {
        TransportError::Timeout { what, after_ms, .. } => {
            assert_eq!((what, after_ms), ("fetch", config.fetch_timeout_ms));
        }
        other => panic!("expected a timeout, found {other}"),
    }
    assert!(
        took >= Duration::from_millis(config.fetch_timeout_ms),
        "ended early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(config.fetch_timeout_ms * 4),
        "ended late: {took:?}"
    );
    assert_eq!(client.counters().timeouts, 1);
    client.close().await;
    server.close().await;
}

/// With `fetches_in_flight_max = 2`, the server never sees more than two requests at once:
/// neither from one `fetch_many` nor from eight callers fetching at the same time.
pub async fn in_flight_bound_holds<F: TransportFactory>(f: &F) {
    let inner = MemorySource::new();
    let blocks: Vec<_> = (0..8).map(|i| test_block(ns(), 10_000, 100 + i)).collect();
    for b in &blocks {
        inner.insert(b.clone());
    }
    let source = SlowCountingSource::new(inner, Duration::from_millis(150));
    let server = build(f, suite_config(), source.clone()).await;
    let config = TransportConfig {
        fetches_in_flight_max: 2,
        ..suite_config()
    };
    let client = Arc::new(build(f, config, Arc::new(MemorySource::new())).await);
    let ids: Vec<BlockId> = blocks.iter().map(|b| b.id()).collect();
    let results = client.fetch_many(&server.local_peer(), ns(), &ids).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert_eq!(
        source.peak(),
        2,
        "fetch_many: server saw {} lookups at once",
        source.peak()
    );

    let source = SlowCountingSource::new(MemorySource::new(), Duration::from_millis(150));
    let server2 = build(f, suite_config(), source.clone()).await;
    let mut callers = tokio::task::JoinSet::new();
    for id in ids {
        let (client, peer) = (client.clone(), server2.local_peer());
        callers.spawn(async move { client.fetch(&peer, ns(), id).await.err() });
    }
    while let Some(r) = callers.join_next().await {
        let err = r.expect("caller task");
        assert!(
            matches!(err, Some(TransportError::NotFound { .. })),
            "{err:?}"
        );
    }
    assert_eq!(
        source.peak(),
        2,
        "8 callers: server saw {} lookups at once",
        source.peak()
    );
    let c = client.counters();
    assert_eq!(c.fetches_in_flight_peak, 2);
    assert_eq!(c.fetches_in_flight, 0);
    client.close().await;
    server.close().await;
    server2.close().await;
}

/// An empty owner list and a list of owners that all fail give typed errors.
pub async fn owner_lists<F: TransportFactory>(f: &F) {
    let client = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let empty = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let id = BlockId([3; 32]);
    let err = client.fetch_from_owners(&[], ns(), id).await.unwrap_err();
    assert!(matches!(err, TransportError::NoOwners { .. }), "{err}");
    let owners = [empty.local_peer(), empty.local_peer()];
    match client.fetch_from_owners(&owners, ns(), id).await {
        Err(TransportError::AllOwnersFailed {
            id: failed,
            failures,
        }) => {
            assert_eq!(failed, id);
            assert_eq!(failures.len(), 2);
            assert!(failures
                .iter()
                .all(|e| matches!(e, TransportError::NotFound { .. })));
        }
        other => panic!("expected every owner to fail, found {other:?}"),
    }
    client.close().await;
    empty.close().await;
}
