//! The transport conformance suite, run against QUIC: real quinn endpoints on 127.0.0.1.

mod common;

use common::QuicFactory;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_passes_the_conformance_suite() {
    kvfabric_transport::conformance::run(&QuicFactory::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_passes_the_message_suite() {
    kvfabric_transport::conformance::messages::run(&QuicFactory::new()).await;
}
