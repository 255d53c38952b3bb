//! RDMA verbs (`rdma` feature, on `rdma-sys`): device discovery, and an [`RdmaTransport`] that
//! says honestly what exists.
//!
//! What is built: [`discover`] lists the devices and ports libibverbs sees; with none it
//! fails with [`TransportError::FabricUnavailable`] naming what is missing (on a machine
//! without RDMA: `ibv_get_device_list` returned NULL, and there is no
//! `/sys/class/infiniband`). What is not built: the verbs data path (RC queue pairs set up
//! through rdma_cm, registered memory regions, an RDMA READ of the block into a registered
//! destination buffer, then verification). No machine this crate is tested on has an RDMA
//! device, so nothing here claims to move bytes: [`RdmaTransport::bind`] always returns an
//! error — no device, or devices found but no data path — and `RdmaTransport` has no value
//! (its one field is uninhabited), so no code can hold one that pretends to work. On an RDMA
//! fabric today, use the UCX transport with `ucx.tls = "rc"` (UCX drives the verbs itself).

mod discover;

use std::net::SocketAddr;
use std::sync::Arc;

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};

use crate::config::TransportConfig;
use crate::counters::CountersSnapshot;
use crate::error::TransportError;
use crate::peer::PeerAddr;
use crate::source::BlockSource;
use crate::transport::{Transport, TransportFuture};

pub use discover::{discover, missing, RdmaDevice, RdmaPort, DEV_DIR, SYSFS_CLASS_DIR};

/// No value of this type exists.
#[derive(Debug, Clone, Copy)]
enum Never {}

/// The RDMA verbs transport: cannot be constructed yet (see the module docs).
#[derive(Debug)]
pub struct RdmaTransport {
    never: Never,
}

impl RdmaTransport {
    /// Discovers devices, then refuses: with no device, the discovery error (what is
    /// missing); with devices, a [`TransportError::FabricUnavailable`] that lists them and says
    /// the verbs data path is not implemented.
    pub async fn bind(
        config: TransportConfig,
        _name: impl Into<String>,
        _listen: SocketAddr,
        _source: Arc<dyn BlockSource>,
    ) -> Result<RdmaTransport, TransportError> {
        config.validate()?;
        let devices = discover()?;
        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        Err(TransportError::FabricUnavailable {
            fabric: "RDMA",
            reason: format!(
                "found {} device(s) [{}], but the verbs data path (RC queue pairs over rdma_cm, \
                 registered memory, RDMA READ into a registered buffer) is not implemented in \
                 this build; on this fabric use the UCX transport with ucx.tls = \"rc\"",
                devices.len(),
                list.join("; ")
            ),
        })
    }
}

impl Transport for RdmaTransport {
    fn fetch<'a>(
        &'a self,
        _: &'a PeerAddr,
        _: NamespaceKey,
        _: BlockId,
    ) -> TransportFuture<'a, Result<VerifiedBlock, TransportError>> {
        match self.never {}
    }

    fn fetch_many<'a>(
        &'a self,
        _: &'a PeerAddr,
        _: NamespaceKey,
        _: &'a [BlockId],
    ) -> TransportFuture<'a, Vec<Result<VerifiedBlock, TransportError>>> {
        match self.never {}
    }

    fn push<'a>(
        &'a self,
        _: &'a PeerAddr,
        _: &'a VerifiedBlock,
    ) -> TransportFuture<'a, Result<(), TransportError>> {
        match self.never {}
    }

    fn probe<'a>(
        &'a self,
        _: &'a PeerAddr,
        _: NamespaceKey,
        _: BlockId,
    ) -> TransportFuture<'a, Result<u64, TransportError>> {
        match self.never {}
    }

    fn set_aside(&self, _peer: &PeerAddr, _since: std::time::Instant) {
        match self.never {}
    }

    fn local_peer(&self) -> PeerAddr {
        match self.never {}
    }

    fn counters(&self) -> CountersSnapshot {
        match self.never {}
    }

    fn close(&self) -> TransportFuture<'_, ()> {
        match self.never {}
    }
}
