//! The GPU tier: the device tier ([`DeviceTier`]) over CUDA memory through cudarc (driver
//! API, dynamically loaded).
//!
//! cudarc panics when the driver library is missing, so [`probe`] looks for it first and
//! [`open`] refuses with [`StoreError::TierUnavailable`] and the reason instead of
//! panicking. Device memory is taken in regions (one `cuMemAlloc` each) and placed first-fit
//! by the device tier; reads copy back to the host and are verified against the block id
//! before they are returned (a read-back across a device boundary is exactly where wrong KV
//! gets served silently).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use crate::error::StoreError;
use crate::handle::Tier;
use crate::tier::device::{DeviceMemory, DeviceTier};
use crate::tier::gpu_probe::GpuProbe;
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

/// CUDA device memory on one GPU: regions from `cuMemAlloc`, synchronous copies on the
/// context's default stream.
pub struct CudaMemory {
    stream: Arc<CudaStream>,
    regions: Vec<CudaSlice<u8>>,
}

/// The GPU tier: the device tier over CUDA memory.
pub type GpuTier = DeviceTier<CudaMemory>;

/// A GPU tier of `capacity` bytes on device `ordinal`, or the reason it cannot run here.
pub fn open(ordinal: usize, capacity: ByteCount, region_bytes: u64) -> Result<GpuTier, StoreError> {
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
    let memory = CudaMemory {
        stream: ctx.default_stream(),
        regions: Vec::new(),
    };
    Ok(DeviceTier::new(memory, capacity, region_bytes))
}

fn gpu_err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Gpu(format!("{what}: {e}"))
}

impl CudaMemory {
    fn region(&self, region: u32) -> Result<&CudaSlice<u8>, StoreError> {
        self.regions
            .get(region as usize)
            .ok_or_else(|| StoreError::Gpu(format!("no device region {region}")))
    }
}

impl DeviceMemory for CudaMemory {
    fn alloc(&mut self, bytes: u64) -> Result<(), StoreError> {
        let mem = self
            .stream
            .alloc_zeros::<u8>(bytes as usize)
            .map_err(|e| gpu_err("device allocation", e))?;
        self.regions.push(mem);
        Ok(())
    }

    fn regions(&self) -> usize {
        self.regions.len()
    }

    fn copy_in(&mut self, region: u32, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.region(region)?;
        let start = offset as usize;
        let mut dst = self.regions[region as usize].slice_mut(start..start + bytes.len());
        self.stream
            .memcpy_htod(bytes, &mut dst)
            .map_err(|e| gpu_err("copy to device", e))?;
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("synchronize", e))
    }

    fn copy_out(&mut self, region: u32, offset: u64, out: &mut [u8]) -> Result<(), StoreError> {
        let start = offset as usize;
        let src = self.region(region)?.slice(start..start + out.len());
        self.stream
            .memcpy_dtoh(&src, out)
            .map_err(|e| gpu_err("copy to host", e))?;
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("synchronize", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never panics: with no driver the tier reports itself unavailable with the reason.
    #[test]
    fn unavailable_is_an_error_not_a_panic() {
        match open(0, ByteCount(1 << 20), 1 << 20) {
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
            open(0, ByteCount(4 << 20), 1 << 20).expect("a CUDA device")
        });
    }
}
