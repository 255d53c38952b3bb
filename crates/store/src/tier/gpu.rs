//! The GPU tier: the device tier ([`DeviceTier`]) over CUDA memory through cudarc (driver
//! API, dynamically loaded).
//!
//! cudarc panics when the driver library is missing, so [`probe`] looks for it first and
//! [`open`] refuses with [`StoreError::TierUnavailable`] and the reason instead of
//! panicking. Device memory is taken in regions (one `cuMemAlloc` each) and placed first-fit
//! by the device tier; reads copy back to the host and are verified against the block id
//! before they are returned (a read-back across a device boundary is exactly where wrong KV
//! gets served silently). Every copy runs on the calling thread's own stream and is waited
//! for, so reads outside the store's lock ([`crate::tier::device::DeviceRead`]) copy at once.

use std::mem::MaybeUninit;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, CudaSlice, DevicePtr, DriverError};

use crate::error::StoreError;
use crate::handle::Tier;
use crate::tier::device::{DeviceMemory, DeviceTier, RegionCopyOut};
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

/// CUDA device memory on one GPU: regions from `cuMemAlloc`, each copy on the calling
/// thread's own stream (CUDA's per-thread stream) and waited for, so reads on many threads
/// copy at once.
pub struct CudaMemory {
    ctx: Arc<CudaContext>,
    staging: Arc<StagingPool>,
    regions: Vec<Arc<CudaRegion>>,
}

/// One region of device memory: the allocation (freed when the last holder, the tier or a
/// read in flight, lets go) and its address.
struct CudaRegion {
    ctx: Arc<CudaContext>,
    /// Owns the allocation; only its address is used once taken.
    _memory: CudaSlice<u8>,
    /// The tier's staging buffers for reads.
    staging: Arc<StagingPool>,
    base: CUdeviceptr,
    len: u64,
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
    // SAFETY: every copy waits for its stream before it returns, and a region is allocated
    // (and zeroed, and waited for) before any copy sees it, so cudarc's per-slice events
    // order nothing that is not already ordered.
    unsafe { ctx.disable_event_tracking() };
    let memory = CudaMemory {
        ctx,
        staging: Arc::default(),
        regions: Vec::new(),
    };
    Ok(DeviceTier::new(memory, capacity, region_bytes))
}

fn gpu_err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Gpu(format!("{what}: {e}"))
}

impl CudaRegion {
    /// The device address of `len` bytes at `offset`, or an error if they run past the end.
    fn at(&self, offset: u64, len: usize) -> Result<CUdeviceptr, StoreError> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.len => Ok(self.base + offset),
            _ => Err(StoreError::Gpu(format!(
                "{len} bytes at {offset} run past a region of {}",
                self.len
            ))),
        }
    }

    /// Runs `copy` on this thread's stream and waits for it.
    fn on_thread_stream(
        &self,
        what: &str,
        copy: impl FnOnce(cudarc::driver::sys::CUstream) -> Result<(), DriverError>,
    ) -> Result<(), StoreError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| gpu_err("context", e))?;
        let stream = self.ctx.per_thread_stream();
        copy(stream.cu_stream()).map_err(|e| gpu_err(what, e))?;
        stream.synchronize().map_err(|e| gpu_err("synchronize", e))
    }
}

/// Bytes of each page-locked staging buffer.
const STAGING_BYTES: usize = 256 << 10;

/// A page-locked host buffer through which one copy at a time comes off the device: a copy
/// into pageable memory is staged by the driver through buffers its threads share, so reads
/// on many threads would take turns; each with a buffer of its own copies at once.
struct Staging {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
}

// SAFETY: the buffer is plain host memory owned by this value; one user at a time (taken
// from and given back to the pool by value).
unsafe impl Send for Staging {}

/// Staging buffers not in use, shared by a tier's regions: a read takes one for its copy and
/// gives it back, so buffers are made once per concurrent copy, not per thread (a read's
/// helper thread lives for one read).
#[derive(Default)]
struct StagingPool {
    free: std::sync::Mutex<Vec<Staging>>,
}

impl StagingPool {
    fn take(&self, ctx: &Arc<CudaContext>) -> Result<Staging, StoreError> {
        let spare = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match spare {
            Some(s) => Ok(s),
            None => Staging::new(ctx),
        }
    }

    fn give_back(&self, s: Staging) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    }
}

impl Staging {
    fn new(ctx: &Arc<CudaContext>) -> Result<Staging, StoreError> {
        ctx.bind_to_thread().map_err(|e| gpu_err("context", e))?;
        // SAFETY: a plain page-locked allocation (not write-combined: the CPU reads it back),
        // freed by `Drop` with its context bound.
        let ptr = unsafe { cudarc::driver::result::malloc_host(STAGING_BYTES, 0) }
            .map_err(|e| gpu_err("page-locked staging buffer", e))?;
        Ok(Staging {
            ctx: Arc::clone(ctx),
            ptr: ptr.cast(),
        })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `malloc_host` in this context; no copy is in flight (each
            // is waited for).
            let _ = unsafe { cudarc::driver::result::free_host(self.ptr.cast()) };
        }
    }
}

impl Drop for CudaRegion {
    /// Binds the context to the dropping thread (the tier's or the last read's) before the
    /// allocation is freed: the free is issued on the context's stream.
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
    }
}

impl RegionCopyOut for CudaRegion {
    fn copy_out(&self, offset: u64, out: &mut [MaybeUninit<u8>]) -> Result<(), StoreError> {
        let src = self.at(offset, out.len())?;
        let staging = self.staging.take(&self.ctx)?;
        let copied = (|| {
            let mut at = 0;
            for piece in out.chunks_mut(STAGING_BYTES) {
                let len = piece.len();
                self.on_thread_stream("copy to host", |stream| {
                    // SAFETY: `src + at` is `len` bytes inside this live allocation, and the
                    // staging buffer holds `STAGING_BYTES >= len`; waited for before return.
                    unsafe {
                        cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                            staging.ptr.cast(),
                            src + at as u64,
                            len,
                            stream,
                        )
                        .result()
                    }
                })?;
                // SAFETY: the copy above wrote `len` bytes of the staging buffer and is done;
                // `piece` is the caller's, `len` bytes, not overlapping it.
                unsafe {
                    std::ptr::copy_nonoverlapping(staging.ptr, piece.as_mut_ptr().cast(), len)
                };
                at += len;
            }
            Ok(())
        })();
        // A buffer whose copy failed is dropped (freed), not reused.
        if copied.is_ok() {
            self.staging.give_back(staging);
        }
        copied
    }
}

impl DeviceMemory for CudaMemory {
    fn alloc(&mut self, bytes: u64) -> Result<(), StoreError> {
        let stream = self.ctx.default_stream();
        let memory = stream
            .alloc_zeros::<u8>(bytes as usize)
            .map_err(|e| gpu_err("device allocation", e))?;
        stream
            .synchronize()
            .map_err(|e| gpu_err("synchronize", e))?;
        let (base, _) = memory.device_ptr(&stream);
        self.regions.push(Arc::new(CudaRegion {
            ctx: Arc::clone(&self.ctx),
            _memory: memory,
            staging: Arc::clone(&self.staging),
            base,
            len: bytes,
        }));
        Ok(())
    }

    fn regions(&self) -> usize {
        self.regions.len()
    }

    fn copy_in(&mut self, region: u32, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        let r = self.cuda_region(region)?;
        let dst = r.at(offset, bytes.len())?;
        r.on_thread_stream("copy to device", |stream| {
            // SAFETY: `dst` is `bytes.len()` bytes inside this live allocation, which no read
            // is copying (the tier writes only a free range); waited for before return.
            unsafe { cudarc::driver::result::memcpy_htod_async(dst, bytes, stream) }
        })
    }

    fn region(&self, region: u32) -> Result<Arc<dyn RegionCopyOut>, StoreError> {
        Ok(self.cuda_region(region)? as Arc<dyn RegionCopyOut>)
    }
}

impl CudaMemory {
    fn cuda_region(&self, region: u32) -> Result<Arc<CudaRegion>, StoreError> {
        self.regions
            .get(region as usize)
            .cloned()
            .ok_or_else(|| StoreError::Gpu(format!("no device region {region}")))
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

    /// Needs a GPU: eight DeepSeek-V3-sized blocks read back at once, each on its own thread
    /// (each copying on its own stream) without the tier, every byte as written.
    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_detached_reads_run_at_once_on_many_threads() {
        use crate::tier::{conformance, TierBackend};
        let mut t = open(0, ByteCount(64 << 20), 32 << 20).expect("a CUDA device");
        let blocks: Vec<_> = (0..8)
            .map(|i| {
                let (id, ns, bytes) = conformance::block(20 + i, 4_497_472);
                let h = t.write(&id, &ns, &bytes).unwrap();
                (id, bytes, t.device_read(&h).unwrap().expect("detached"))
            })
            .collect();
        std::thread::scope(|s| {
            for (id, bytes, read) in &blocks {
                s.spawn(move || assert!(read.run(id).unwrap() == *bytes, "block {id}"));
            }
        });
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
