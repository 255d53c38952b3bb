//! A connection the pool forgot (a call on it timed out, so the next call dials afresh)
//! closes once the calls on it are done. Before, the task counting closures held a handle to
//! every connection, so a forgotten one stayed open, kept alive by keep-alives, for the life
//! of the process: each timed-out call took one of the peer's `connections_max` server slots
//! for good, until the peer refused every new connection (found by the 30-minute chaos run:
//! a leader that refused both followers after the heal).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::QuicFactory;
use kvfabric_transport::conformance::messages::{MessengerFactory, ECHO};
use kvfabric_transport::conformance::suite_config;
use kvfabric_transport::source::MemorySource;
use kvfabric_transport::{MessageHandler, Messenger, Transport, TransportError, TransportFuture};

/// Answers with the request reversed; `b"stall"` never.
struct Reverse;

impl MessageHandler for Reverse {
    fn handle(&self, mut request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            if request == b"stall" {
                std::future::pending::<()>().await;
            }
            request.reverse();
            Some(request)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_forgotten_after_a_timeout_closes_on_both_sides() {
    let f = QuicFactory::new();
    let build = || f.build_with_channels(suite_config(), Arc::new(MemorySource::new()), vec![ECHO]);
    let server = build().await.expect("server");
    let client = build().await.expect("client");
    server.serve(ECHO, Arc::new(Reverse)).expect("serve");
    let peer = server.local_peer();
    let limit = Duration::from_secs(5);
    assert_eq!(
        client
            .call(ECHO, &peer, b"ab".to_vec(), limit)
            .await
            .unwrap(),
        b"ba"
    );

    // Each timed-out call makes the pool forget its connection; the next call dials again.
    let rounds = 5;
    for _ in 0..rounds {
        let err = client
            .call(ECHO, &peer, b"stall".to_vec(), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        assert_eq!(
            client
                .call(ECHO, &peer, b"cd".to_vec(), limit)
                .await
                .unwrap(),
            b"dc"
        );
    }
    assert_eq!(client.counters().connections_opened, rounds + 1);

    // Every forgotten connection closes (its calls are over): the server ends its side of
    // each, and holds only the one the pool still uses.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (c, s) = (client.counters(), server.counters());
        if c.connections_closed == rounds && s.connections_closed == rounds {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "forgotten connections still open: client closed {} of {rounds}, server closed {} \
             (idle timeout {} ms, keep-alive {} ms)",
            c.connections_closed,
            s.connections_closed,
            suite_config().idle_timeout_ms,
            suite_config().keep_alive_ms,
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.close().await;
    server.close().await;
}
