//! Push and probe with real quinn endpoints on 127.0.0.1, from a hand-rolled client: bytes
//! that do not hash to the pushed id are rejected (typed, counted, never stored), a push
//! larger than the receiver's bound or cut short closes that connection, and the server keeps
//! taking good pushes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{raw_connect, QuicFactory};
use kvfabric_store::NamespaceKey;
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::conformance::{eventually, suite_config, TransportFactory};
use kvfabric_transport::frame::{
    decode_response, push_header, FrameHeader, FrameKind, FRAME_HEADER_LEN,
};
use kvfabric_transport::{MemorySource, Transport, TransportConfig, TransportError};

fn ns() -> NamespaceKey {
    NamespaceKey::derive("push")
}

/// Sends a push header and `body` on a fresh stream of `conn`; the answer's header, if any.
async fn raw_push(
    conn: &quinn::Connection,
    header: FrameHeader,
    body: &[u8],
) -> Option<FrameHeader> {
    let (mut send, mut recv) = conn.open_bi().await.ok()?;
    send.write_all(&header.encode()).await.ok()?;
    send.write_all(body).await.ok()?;
    send.finish().ok();
    let mut head = [0u8; FRAME_HEADER_LEN];
    recv.read_exact(&mut head).await.ok()?;
    decode_response(&head, &header, u64::MAX).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_oversized_or_short_pushes_are_refused_and_good_ones_still_stored() {
    let f = QuicFactory::new();
    let small = TransportConfig {
        max_frame_bytes: 150_000,
        ..suite_config()
    };
    let target = f
        .build(small, Arc::new(MemorySource::new()))
        .await
        .expect("target");
    let peer = target.local_peer();
    let identity = f.ca.issue(&f.next_name()).expect("identity");
    let block = test_block(ns(), 100_000, 1);

    tracing::info!("a flipped byte: rejected, counted, not stored");
    let conn = raw_connect(&identity, &peer).await;
    let mut lie = block.bytes().to_vec();
    lie[5_000] ^= 1;
    let header = push_header(ns(), block.id(), lie.len() as u64);
    let answer = raw_push(&conn, header, &lie).await.expect("an answer");
    assert_eq!(answer.kind, FrameKind::Rejected);
    eventually("the target counts the rejection", || {
        let c = target.counters();
        c.pushes_rejected == 1 && c.verify_failures == 1 && c.pushes_stored == 0
    })
    .await;
    let prober = f
        .build(suite_config(), Arc::new(MemorySource::new()))
        .await
        .expect("prober");
    let err = prober.probe(&peer, ns(), block.id()).await.unwrap_err();
    assert!(matches!(err, TransportError::NotFound { .. }), "{err}");

    tracing::info!("the true bytes on the same connection: stored");
    let header = push_header(ns(), block.id(), block.bytes().len() as u64);
    let answer = raw_push(&conn, header, block.bytes())
        .await
        .expect("an answer");
    assert_eq!(answer.kind, FrameKind::Stored);
    let len = prober.probe(&peer, ns(), block.id()).await.expect("held");
    assert_eq!(len, block.bytes().len() as u64);

    tracing::info!("past the receiver's bound: the connection is closed");
    let big = test_block(ns(), 200_000, 2);
    let header = push_header(ns(), big.id(), big.bytes().len() as u64);
    assert!(raw_push(&conn, header, big.bytes()).await.is_none());
    tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("closed by the target");

    tracing::info!("cut short: the connection is closed, nothing stored");
    let conn = raw_connect(&identity, &peer).await;
    let other = test_block(ns(), 50_000, 3);
    let header = push_header(ns(), other.id(), other.bytes().len() as u64);
    assert!(raw_push(&conn, header, &other.bytes()[..40_000])
        .await
        .is_none());
    tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("closed by the target");
    let err = prober.probe(&peer, ns(), other.id()).await.unwrap_err();
    assert!(matches!(err, TransportError::NotFound { .. }), "{err}");
    eventually("both violations counted", || {
        target.counters().protocol_violations == 2
    })
    .await;

    tracing::info!("the target still takes pushes through the transport");
    prober.push(&peer, &other).await.expect("push");
    assert_eq!(
        prober.probe(&peer, ns(), other.id()).await.expect("held"),
        other.bytes().len() as u64
    );
    prober.close().await;
    target.close().await;
}
