//! The transport conformance suite over UCX (`ucx` feature) on 127.0.0.1: in stream mode and
//! in get mode (one-sided reads) over TCP (`ucx.tls = "tcp"`, what CI runs), and in get mode
//! over UCX's shared-memory transports (leases staged in UCX shared memory).

#![cfg(feature = "ucx")]

mod ucx_support;

use kvfabric_transport::UcxMode;
use ucx_support::{Fabric, UcxFactory, SHARED_MEMORY, SHARED_MEMORY_COPY_THREAD, TCP};

async fn suite(mode: UcxMode, fabric: Fabric) {
    kvfabric_transport::conformance::run(&UcxFactory { mode, fabric }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ucx_stream_mode_over_tcp_passes_the_conformance_suite() {
    suite(UcxMode::Stream, TCP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ucx_get_mode_over_tcp_passes_the_conformance_suite() {
    suite(UcxMode::Get, TCP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ucx_get_mode_over_shared_memory_passes_the_conformance_suite() {
    suite(UcxMode::Get, SHARED_MEMORY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ucx_get_mode_over_shared_memory_with_a_copy_thread_passes_the_conformance_suite() {
    suite(UcxMode::Get, SHARED_MEMORY_COPY_THREAD).await;
}
