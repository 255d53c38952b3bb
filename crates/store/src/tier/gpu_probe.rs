//! Whether a GPU tier can run here, and if not, why — without ever panicking.
//!
//! cudarc's `CudaContext::new` panics when the driver library is missing, so the GPU tier is
//! only constructed after [`probe`] has found the driver and a device.

/// The outcome of probing for a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuProbe {
    /// A CUDA driver and at least one device are present.
    Available {
        /// Devices the driver reports.
        devices: u32,
    },
    /// No usable GPU; the reason names what is missing.
    Unavailable {
        /// Human-readable reason.
        reason: String,
    },
}

/// Probes for the CUDA driver and devices.
pub fn probe() -> GpuProbe {
    #[cfg(feature = "cuda")]
    {
        crate::tier::gpu::probe()
    }
    #[cfg(not(feature = "cuda"))]
    {
        GpuProbe::Unavailable {
            reason: "built without the `cuda` feature (rebuild with --features cuda)".to_string(),
        }
    }
}
