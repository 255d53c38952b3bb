//! Storage tiers behind one trait, [`TierBackend`], with a conformance suite
//! ([`conformance`]) that every implementation runs.
//!
//! A tier stores opaque block bytes at [`Handle`]s it hands out; it never decides what to
//! evict (the store's policy does) and never exceeds its capacity.

pub mod conformance;
pub mod device;
pub mod disk;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod gpu_probe;
pub mod host;
pub(crate) mod host_region;
pub mod regions;

use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::id::{BlockId, NamespaceKey};
use crate::units::ByteCount;

/// One storage tier.
pub trait TierBackend: Send {
    /// Which tier this is.
    fn tier(&self) -> Tier;

    /// Bytes this tier may hold at most.
    fn capacity(&self) -> ByteCount;

    /// Bytes currently allocated to live blocks.
    fn used(&self) -> ByteCount;

    /// Whether a block of `len` bytes could be written now without freeing anything.
    fn can_fit(&self, len: ByteCount) -> bool;

    /// Stores `bytes` (a whole block, header ‖ payload) for block `id` under `namespace`.
    ///
    /// Fails with [`StoreError::Full`] or [`StoreError::TooLarge`] without side effects when
    /// there is no room.
    fn write(
        &mut self,
        id: &BlockId,
        namespace: &NamespaceKey,
        bytes: &[u8],
    ) -> Result<Handle, StoreError>;

    /// Reads the bytes at `handle`. Tiers that can lose or corrupt bytes (disk, GPU) check them
    /// against `id` before returning and report [`StoreError::Corrupt`] instead of serving them.
    fn read(&mut self, handle: &Handle, id: &BlockId) -> Result<Vec<u8>, StoreError>;

    /// Releases the allocation at `handle`.
    fn free(&mut self, handle: &Handle) -> Result<(), StoreError>;

    /// A read of the block at `handle` that runs without this tier (a device tier's copy off
    /// the device and hash, on the caller's thread: [`device::DeviceRead`]), or `None` for a
    /// tier whose reads run through [`TierBackend::read`] only.
    fn device_read(&self, _handle: &Handle) -> Result<Option<device::DeviceRead>, StoreError> {
        Ok(None)
    }
}
