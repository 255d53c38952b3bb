//! The transport conformance suites, run against the in-memory transport.

use std::sync::Arc;

use kvfabric_transport::conformance::messages::MessengerFactory;
use kvfabric_transport::conformance::TransportFactory;
use kvfabric_transport::{
    BlockSource, Channel, MemoryNetwork, MemoryTransport, TransportConfig, TransportError,
    TransportFuture,
};

/// Nodes node1, node2, … on one network.
struct MemoryFactory {
    net: Arc<MemoryNetwork>,
    next: std::sync::atomic::AtomicU32,
}

impl MemoryFactory {
    fn new() -> MemoryFactory {
        MemoryFactory {
            net: MemoryNetwork::new(7),
            next: std::sync::atomic::AtomicU32::new(1),
        }
    }

    fn name(&self) -> String {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("node{n}")
    }
}

impl TransportFactory for MemoryFactory {
    type T = MemoryTransport;

    fn build(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
    ) -> TransportFuture<'_, Result<MemoryTransport, TransportError>> {
        Box::pin(async move { self.net.join(&self.name(), config, source, Vec::new()) })
    }
}

impl MessengerFactory for MemoryFactory {
    type T = MemoryTransport;

    fn build_with_channels(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
        channels: Vec<Channel>,
    ) -> TransportFuture<'_, Result<MemoryTransport, TransportError>> {
        Box::pin(async move { self.net.join(&self.name(), config, source, channels) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_passes_the_conformance_suite() {
    kvfabric_transport::conformance::run(&MemoryFactory::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_passes_the_message_suite() {
    kvfabric_transport::conformance::messages::run(&MemoryFactory::new()).await;
}
