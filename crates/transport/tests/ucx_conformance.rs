//! The transport conformance suite over UCX (`ucx` feature), on TCP over 127.0.0.1
//! (`ucx.tls = "tcp"`, the default; CI also sets `UCX_TLS=tcp`).

#![cfg(feature = "ucx")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use kvfabric_transport::conformance::TransportFactory;
use kvfabric_transport::{
    BlockSource, TransportConfig, TransportError, TransportFuture, UcxTransport,
};

/// Builds UCX transports named node1, node2, … on loopback.
struct UcxFactory {
    next: AtomicU32,
}

impl TransportFactory for UcxFactory {
    type T = UcxTransport;

    fn build(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
    ) -> TransportFuture<'_, Result<UcxTransport, TransportError>> {
        Box::pin(async move {
            let name = format!("node{}", self.next.fetch_add(1, Ordering::Relaxed));
            let lo = "127.0.0.1:0".parse().expect("loopback");
            UcxTransport::bind(config, name, lo, source).await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ucx_passes_the_conformance_suite() {
    kvfabric_transport::conformance::run(&UcxFactory {
        next: AtomicU32::new(1),
    })
    .await;
}
