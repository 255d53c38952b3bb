//! The message-channel suite, for transports that carry channels ([`Messenger`]): a request
//! reaches the channel's handler and its answer comes back; messages past the channel's
//! bound are refused typed; a channel the transport does not carry is typed; a peer with no
//! handler yet, or one that never answers, ends the call with an error within its bound,
//! and fails no other call in flight beside it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::suite_config;
use crate::config::TransportConfig;
use crate::error::TransportError;
use crate::message::{Channel, MessageHandler, Messenger};
use crate::source::{BlockSource, MemorySource};
use crate::transport::{Transport, TransportFuture};

/// The channel the suite carries.
pub const ECHO: Channel = Channel {
    alpn: b"kvfabric-conformance-echo/1",
    message_bytes_max: 64 * 1024,
    handle_timeout_ms: 5_000,
};

/// A second channel, carried but never served.
pub const UNSERVED: Channel = Channel {
    alpn: b"kvfabric-conformance-unserved/1",
    message_bytes_max: 1024,
    handle_timeout_ms: 5_000,
};

/// A channel nobody carries.
pub const ABSENT: Channel = Channel {
    alpn: b"kvfabric-conformance-absent/1",
    message_bytes_max: 1024,
    handle_timeout_ms: 5_000,
};

/// Builds instances of one transport that carries channels.
pub trait MessengerFactory: Send + Sync {
    /// The implementation under test.
    type T: Transport + Messenger + 'static;

    /// A new instance serving `source`, carrying `channels`.
    fn build_with_channels(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
        channels: Vec<Channel>,
    ) -> TransportFuture<'_, Result<Self::T, TransportError>>;
}

/// How long the handler takes to answer `b"slow"`.
const SLOW_MS: u64 = 1_500;

/// Answers every request with its bytes reversed, counting them; `b"slow"` after
/// [`SLOW_MS`]; `b"stall"` never.
#[derive(Default)]
struct Reverse {
    seen: AtomicU64,
}

impl MessageHandler for Reverse {
    fn handle(&self, mut request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            self.seen.fetch_add(1, Ordering::SeqCst);
            if request == b"stall" {
                std::future::pending::<()>().await;
            }
            if request == b"slow" {
                tokio::time::sleep(Duration::from_millis(SLOW_MS)).await;
            }
            request.reverse();
            Some(request)
        })
    }
}

/// Runs every message case.
pub async fn run<F: MessengerFactory>(f: &F) {
    let channels = vec![ECHO, UNSERVED];
    let build = |c: TransportConfig| {
        f.build_with_channels(c, Arc::new(MemorySource::new()), channels.clone())
    };
    let server = build(suite_config()).await.expect("server");
    let client = build(suite_config()).await.expect("client");
    let handler = Arc::new(Reverse::default());
    server.serve(ECHO, handler.clone()).expect("serve");
    let peer = server.local_peer();
    let limit = Duration::from_secs(5);

    tracing::info!("messages: a request is answered by the channel's handler");
    let answer = client
        .call(ECHO, &peer, b"abc".to_vec(), limit)
        .await
        .expect("call");
    assert_eq!(answer, b"cba");
    let big = vec![7u8; ECHO.message_bytes_max as usize];
    let answer = client
        .call(ECHO, &peer, big.clone(), limit)
        .await
        .expect("a full-size message");
    assert_eq!(answer.len(), big.len());
    assert_eq!(handler.seen.load(Ordering::SeqCst), 2);
    assert_eq!(client.counters().messages_ok, 2);
    super::eventually("the server counts both", || {
        server.counters().messages_served == 2
    })
    .await;

    tracing::info!("messages: past the bound, an unknown channel, no handler");
    let err = client
        .call(
            ECHO,
            &peer,
            vec![0; ECHO.message_bytes_max as usize + 1],
            limit,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::BadMessage { .. }), "{err}");
    assert_eq!(
        handler.seen.load(Ordering::SeqCst),
        2,
        "refused before sending"
    );
    let err = client
        .call(ABSENT, &peer, b"x".to_vec(), limit)
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::NoChannel { .. }), "{err}");
    let err = server.serve(ABSENT, handler.clone()).unwrap_err();
    assert!(matches!(err, TransportError::NoChannel { .. }), "{err}");
    let err = client
        .call(UNSERVED, &peer, b"x".to_vec(), limit)
        .await
        .unwrap_err();
    assert!(
        !matches!(
            err,
            TransportError::NoChannel { .. } | TransportError::BadMessage { .. }
        ),
        "a carried channel without a handler fails as an unanswered call: {err}"
    );

    tracing::info!("messages: a handler that never answers ends in the caller's bound");
    let short = Duration::from_millis(600);
    let started = Instant::now();
    let err = client
        .call(ECHO, &peer, b"stall".to_vec(), short)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Timeout {
                what: "message",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() >= short,
        "ended early: {:?}",
        started.elapsed()
    );
    assert!(err.is_peer_unreachable());
    let answer = client
        .call(ECHO, &peer, b"again".to_vec(), limit)
        .await
        .expect("the channel still works");
    assert_eq!(answer, b"niaga");

    tracing::info!("messages: a call timing out does not fail another in flight beside it");
    let (slow, stalled) = tokio::join!(client.call(ECHO, &peer, b"slow".to_vec(), limit), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.call(ECHO, &peer, b"stall".to_vec(), short).await
    });
    assert!(stalled.is_err(), "the stalled call timed out");
    assert_eq!(slow.expect("the slow call beside it answered"), b"wols");
    client.close().await;
    server.close().await;
}
