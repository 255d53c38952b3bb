//! The GPU tier: device memory through cudarc (driver API, dynamically loaded).
//!
//! cudarc panics when the driver library is missing, so [`probe`] looks for it first and
//! [`GpuTier::new`] refuses with [`StoreError::TierUnavailable`] and the reason instead of
//! panicking. Device memory is taken in regions (one `cuMemAlloc` each) and placed first-fit
//! by the shared [`RegionBook`]; reads copy back to the host and are verified against the
//! block id before they are returned (a read-back across a device boundary is exactly where
//! wrong KV gets served silently).

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};
use crate::tier::gpu_probe::GpuProbe;
use crate::tier::regions::RegionBook;
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// Default device region: 1 GiB.
pub const REGION_BYTES_DEFAULT: u64 = 1 << 30;

/// Finds the driver and counts devices; never panics.
pub(crate) fn probe() -> GpuProbe {
    // SAFETY: only tries to dlopen the driver library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return GpuProbe::Unavailable {
            reason: "no CUDA driver library (libcuda.so) found".to_string(),
        };
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => GpuProbe::Available { devices: n as u32 },
        Ok(_) => GpuProbe::Unavailable {
            reason: "the CUDA driver reports no device".to_string(),
        },
        Err(e) => GpuProbe::Unavailable {
            reason: format!("CUDA driver init failed: {e}"),
        },
    }
}

/// Device-memory tier on one GPU.
pub struct GpuTier {
    stream: Arc<CudaStream>,
    book: RegionBook,
    regions: Vec<CudaSlice<u8>>,
    /// (region, offset) → namespace of the block there, to verify reads.
    namespaces: HashMap<(u32, u64), NamespaceKey>,
}

impl GpuTier {
    /// A tier of `capacity` bytes on device `ordinal`, or the reason it cannot run here.
    pub fn new(
        ordinal: usize,
        capacity: ByteCount,
        region_bytes: u64,
    ) -> Result<GpuTier, StoreError> {
        let unavailable = |reason: String| StoreError::TierUnavailable {
            tier: Tier::Gpu,
            reason,
        };
        match probe() {
            GpuProbe::Available { devices } if (ordinal as u32) < devices => {}
            GpuProbe::Available { devices } => {
                return Err(unavailable(format!(
                    "device {ordinal} asked, {devices} present"
                )))
            }
            GpuProbe::Unavailable { reason } => return Err(unavailable(reason)),
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| unavailable(format!("context: {e}")))?;
        Ok(GpuTier {
            stream: ctx.default_stream(),
            book: RegionBook::new(Tier::Gpu, capacity, region_bytes),
            regions: Vec::new(),
            namespaces: HashMap::new(),
        })
    }
}

fn gpu_err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Gpu(format!("{what}: {e}"))
}

impl TierBackend for GpuTier {
    fn tier(&self) -> Tier {
        Tier::Gpu
    }

    fn capacity(&self) -> ByteCount {
        self.book.capacity()
    }

    fn used(&self) -> ByteCount {
        self.book.used()
    }

    fn can_fit(&self, len: ByteCount) -> bool {
        self.book.can_fit(len)
    }

    fn write(
        &mut self,
        _id: &BlockId,
        namespace: &NamespaceKey,
        bytes: &[u8],
    ) -> Result<Handle, StoreError> {
        let placement = self.book.allocate(ByteCount(bytes.len() as u64))?;
        if let Some(size) = placement.new_region_bytes {
            match self.stream.alloc_zeros::<u8>(size as usize) {
                Ok(mem) => self.regions.push(mem),
                Err(e) => {
                    self.book.abandon_region(&placement);
                    return Err(gpu_err("device allocation", e));
                }
            }
        }
        let h = placement.handle;
        let region = &mut self.regions[h.region.0 as usize];
        let mut dst = region.slice_mut(h.offset as usize..h.end() as usize);
        self.stream
            .memcpy_htod(bytes, &mut dst)
            .map_err(|e| gpu_err("copy to device", e))?;
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("synchronize", e))?;
        self.namespaces.insert((h.region.0, h.offset), *namespace);
        Ok(h)
    }

    fn read(&mut self, handle: &Handle, id: &BlockId) -> Result<Vec<u8>, StoreError> {
        self.book.check(handle)?;
        let region = &self.regions[handle.region.0 as usize];
        let src = region.slice(handle.offset as usize..handle.end() as usize);
        let mut out = vec![0u8; handle.len.as_usize()];
        self.stream
            .memcpy_dtoh(&src, &mut out)
            .map_err(|e| gpu_err("copy to host", e))?;
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("synchronize", e))?;
        let ns = self.namespaces[&(handle.region.0, handle.offset)];
        let found = Blake3Ids.id(&ns, &[&out]);
        if found != *id {
            return Err(StoreError::Corrupt {
                id: *id,
                segment: format!("gpu region {}", handle.region.0).into(),
                offset: handle.offset,
                reason: format!("device bytes hash to {found}"),
            });
        }
        Ok(out)
    }

    fn free(&mut self, handle: &Handle) -> Result<(), StoreError> {
        self.book.release(handle)?;
        self.namespaces.remove(&(handle.region.0, handle.offset));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never panics: with no driver the tier reports itself unavailable with the reason.
    #[test]
    fn unavailable_is_an_error_not_a_panic() {
        match GpuTier::new(0, ByteCount(1 << 20), 1 << 20) {
            Ok(_) => assert!(matches!(probe(), GpuProbe::Available { .. })),
            Err(StoreError::TierUnavailable { reason, .. }) => {
                assert!(!reason.is_empty());
                assert!(matches!(probe(), GpuProbe::Unavailable { .. }));
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    /// Needs a GPU: `cargo test -p kvfabric-store --features cuda -- --ignored gpu`.
    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_round_trips_blocks_and_passes_conformance() {
        crate::tier::conformance::run(&mut || {
            GpuTier::new(0, ByteCount(4 << 20), 1 << 20).expect("a CUDA device")
        });
    }
}
