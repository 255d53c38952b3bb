//! Shared by the UCX integration tests: UCX transports on 127.0.0.1 in a chosen fetch mode
//! (`stream` or `get`) over a chosen `ucx.tls`, for the conformance suite and the fault tests.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use kvfabric_transport::conformance::TransportFactory;
use kvfabric_transport::{
    BlockSource, TransportConfig, TransportError, TransportFuture, UcxMode, UcxTransport,
};

/// What UCX runs on, and how a server leases blocks.
#[derive(Debug, Clone, Copy)]
pub struct Fabric {
    /// `ucx.tls`.
    pub tls: &'static str,
    /// `ucx.stage_leases`.
    pub stage_leases: bool,
    /// `ucx.copy_thread`.
    pub copy_thread: bool,
}

/// UCX over TCP, what CI runs: `tls = "tcp"`; gets are emulated over it, blocks leased in
/// place.
pub const TCP: Fabric = Fabric {
    tls: "tcp",
    stage_leases: false,
    copy_thread: false,
};
/// UCX's shared-memory transports on one host (`sm`; TCP is needed to set up client-server
/// connections): leased blocks are staged into UCX shared memory, and a get is a copy out of
/// it by the reader.
pub const SHARED_MEMORY: Fabric = Fabric {
    tls: "sm,tcp",
    stage_leases: true,
    copy_thread: false,
};
/// [`SHARED_MEMORY`], the client copying on a helper thread while its progress thread hashes.
pub const SHARED_MEMORY_COPY_THREAD: Fabric = Fabric {
    copy_thread: true,
    ..SHARED_MEMORY
};

static NEXT: AtomicU32 = AtomicU32::new(1);

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("loopback address")
}

/// `config` fetching in `mode` over `fabric`.
pub fn in_mode(mode: UcxMode, fabric: Fabric, mut config: TransportConfig) -> TransportConfig {
    config.ucx.mode = mode;
    config.ucx.tls = fabric.tls.to_string();
    config.ucx.stage_leases = fabric.stage_leases;
    config.ucx.copy_thread = fabric.copy_thread;
    config
}

/// A UCX transport named node1, node2, … on loopback with `config` as it is.
pub async fn bind(
    config: TransportConfig,
    source: Arc<dyn BlockSource>,
) -> Result<UcxTransport, TransportError> {
    let name = format!("node{}", NEXT.fetch_add(1, Ordering::Relaxed));
    UcxTransport::bind(config, name, loopback(), source).await
}

/// Builds UCX transports fetching in `mode` over `fabric` (whatever config the suite passes).
pub struct UcxFactory {
    pub mode: UcxMode,
    pub fabric: Fabric,
}

impl TransportFactory for UcxFactory {
    type T = UcxTransport;

    fn build(
        &self,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
    ) -> TransportFuture<'_, Result<UcxTransport, TransportError>> {
        Box::pin(bind(in_mode(self.mode, self.fabric, config), source))
    }
}
