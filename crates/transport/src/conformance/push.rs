//! The push and probe cases of the conformance suite: a pushed block is verified and stored
//! by the peer in one exchange, and found there afterwards; a peer whose source takes no
//! pushes answers unavailable; a probe says whether, and how large, without moving bytes.

use std::sync::Arc;

use kvfabric_store::BlockId;

use super::sources::{test_block, StallingSource};
use super::{build, ns, suite_config, TransportFactory, BLOCK_PAYLOAD_BYTES};
use crate::error::TransportError;
use crate::source::MemorySource;
use crate::transport::Transport;

/// Push then probe then fetch: the peer holds what was pushed, byte for byte; both sides
/// count it; a probe of an absent block is a typed not-found.
pub async fn push_then_probe_then_fetch<F: TransportFactory>(f: &F) {
    let block = test_block(ns(), BLOCK_PAYLOAD_BYTES, 21);
    let target = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let pusher = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let peer = target.local_peer();
    let err = pusher.probe(&peer, ns(), block.id()).await.unwrap_err();
    assert!(matches!(err, TransportError::NotFound { .. }), "{err}");
    pusher.push(&peer, &block).await.expect("push");
    let len = pusher.probe(&peer, ns(), block.id()).await.expect("probe");
    assert_eq!(len, block.bytes().len() as u64);
    let got = pusher.fetch(&peer, ns(), block.id()).await.expect("fetch");
    assert_eq!(got.bytes(), block.bytes());
    let c = pusher.counters();
    assert_eq!((c.pushes_ok, c.pushes_failed), (1, 0));
    assert_eq!(c.probes_ok, 2);
    super::eventually("the target counts the stored push and both probes", || {
        let t = target.counters();
        t.pushes_stored == 1 && t.probes_served == 2 && t.pushes_rejected == 0
    })
    .await;
    pusher.close().await;
    target.close().await;
}

/// A peer whose source takes no pushes answers unavailable (typed, counted, quickly); a peer
/// that does not answer a probe ends in a typed timeout.
pub async fn a_refused_push_and_a_silent_probe_are_typed<F: TransportFactory>(f: &F) {
    let block = test_block(ns(), BLOCK_PAYLOAD_BYTES, 22);
    let read_only = build(f, suite_config(), Arc::new(StallingSource)).await;
    let pusher = build(f, suite_config(), Arc::new(MemorySource::new())).await;
    let peer = read_only.local_peer();
    let err = pusher.push(&peer, &block).await.unwrap_err();
    assert!(matches!(err, TransportError::Unavailable { .. }), "{err}");
    assert_eq!(pusher.counters().pushes_failed, 1);
    let quick = crate::TransportConfig {
        fetch_timeout_ms: 800,
        connect_timeout_ms: 800,
        ..suite_config()
    };
    let prober = build(f, quick, Arc::new(MemorySource::new())).await;
    let err = prober
        .probe(&peer, ns(), BlockId([9; 32]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, TransportError::Timeout { what: "probe", .. }),
        "{err}"
    );
    assert!(err.is_peer_unreachable());
    assert_eq!(prober.counters().probes_failed, 1);
    for t in [pusher, prober, read_only] {
        t.close().await;
    }
}
