//! The device tier's bookkeeping, apart from the device: [`DeviceTier`] places blocks in
//! regions of device memory (first fit, by the shared [`RegionBook`]), remembers each block's
//! namespace and verifies every read-back against the block's id, over any [`DeviceMemory`].
//!
//! The GPU tier is this over CUDA memory (`gpu::CudaMemory`, the `cuda` feature). With the
//! `testing` feature, [`HostMemory`] puts the same tier over plain host buffers, so that the
//! tier's rules and the store's GPU placement policy are tested on machines with no device;
//! no configuration can choose it (only [`crate::Store::open_with`] takes a backend).

use std::collections::HashMap;

use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey};
use crate::tier::regions::RegionBook;
use crate::tier::TierBackend;
use crate::units::ByteCount;

/// Memory on a device, taken in regions and copied to and from the host.
pub trait DeviceMemory: Send {
    /// Takes a new region of `bytes` bytes (zeroed); it becomes region number
    /// [`DeviceMemory::regions`] before the call.
    fn alloc(&mut self, bytes: u64) -> Result<(), StoreError>;

    /// Regions taken so far.
    fn regions(&self) -> usize;

    /// Copies `bytes` into region `region` at `offset`; the copy is complete on return.
    fn copy_in(&mut self, region: u32, offset: u64, bytes: &[u8]) -> Result<(), StoreError>;

    /// Copies `out.len()` bytes from region `region` at `offset` into `out`.
    fn copy_out(&mut self, region: u32, offset: u64, out: &mut [u8]) -> Result<(), StoreError>;
}

/// A [`Tier::Gpu`] tier over `M`'s memory.
pub struct DeviceTier<M: DeviceMemory> {
    memory: M,
    book: RegionBook,
    /// (region, offset) → namespace of the block there, to verify reads.
    namespaces: HashMap<(u32, u64), NamespaceKey>,
}

impl<M: DeviceMemory> DeviceTier<M> {
    /// A tier of `capacity` bytes over `memory`, taking regions of `region_bytes`.
    pub fn new(memory: M, capacity: ByteCount, region_bytes: u64) -> DeviceTier<M> {
        DeviceTier {
            memory,
            book: RegionBook::new(Tier::Gpu, capacity, region_bytes),
            namespaces: HashMap::new(),
        }
    }

    /// The memory under the tier.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.memory
    }
}

impl<M: DeviceMemory> TierBackend for DeviceTier<M> {
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
            if let Err(e) = self.memory.alloc(size) {
                self.book.abandon_region(&placement);
                return Err(e);
            }
        }
        let h = placement.handle;
        if let Err(e) = self.memory.copy_in(h.region.0, h.offset, bytes) {
            self.book.release(&h)?;
            return Err(e);
        }
        self.namespaces.insert((h.region.0, h.offset), *namespace);
        Ok(h)
    }

    fn read(&mut self, handle: &Handle, id: &BlockId) -> Result<Vec<u8>, StoreError> {
        self.book.check(handle)?;
        let mut out = vec![0u8; handle.len.as_usize()];
        self.memory
            .copy_out(handle.region.0, handle.offset, &mut out)?;
        let ns = self.namespaces[&(handle.region.0, handle.offset)];
        let found = Blake3Ids.id(&ns, &[&out]);
        if found != *id {
            // Quarantined: the space is given back (nothing on a device outlives the process)
            // and the handle is dead, as the store expects of a corrupt read.
            self.free(handle)?;
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

/// Device memory that is plain host buffers (`testing` feature): the device tier's rules and
/// the store's GPU policy, tested where there is no device. Clones share the same memory, so
/// a test keeps one to damage bytes at will ([`HostMemory::flip`]), as a device fault would,
/// and checks that a bad read-back is never served.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Default, Clone)]
pub struct HostMemory {
    regions: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

#[cfg(any(test, feature = "testing"))]
impl HostMemory {
    /// Flips the bits of one byte (region, offset).
    pub fn flip(&self, region: u32, offset: u64) {
        self.with(|r| r[region as usize][offset as usize] ^= 0xff);
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<Vec<u8>>) -> R) -> R {
        f(&mut self.regions.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn range<R>(
        &self,
        region: u32,
        offset: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, StoreError> {
        self.with(|regions| {
            let r = regions
                .get_mut(region as usize)
                .ok_or_else(|| StoreError::Gpu(format!("no region {region}")))?;
            let start = offset as usize;
            let bytes = r.get_mut(start..start + len).ok_or_else(|| {
                StoreError::Gpu(format!(
                    "region {region}: {len} bytes at {offset} run past its end"
                ))
            })?;
            Ok(f(bytes))
        })
    }
}

#[cfg(any(test, feature = "testing"))]
impl DeviceMemory for HostMemory {
    fn alloc(&mut self, bytes: u64) -> Result<(), StoreError> {
        self.with(|r| r.push(vec![0u8; bytes as usize]));
        Ok(())
    }

    fn regions(&self) -> usize {
        self.with(|r| r.len())
    }

    fn copy_in(&mut self, region: u32, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.range(region, offset, bytes.len(), |dst| {
            dst.copy_from_slice(bytes)
        })
    }

    fn copy_out(&mut self, region: u32, offset: u64, out: &mut [u8]) -> Result<(), StoreError> {
        self.range(region, offset, out.len(), |src| out.copy_from_slice(src))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::conformance;

    #[test]
    fn passes_conformance_over_host_memory() {
        conformance::run(&mut || {
            DeviceTier::new(HostMemory::default(), ByteCount(4 << 20), 1 << 20)
        });
    }

    #[test]
    fn a_damaged_read_back_is_corrupt_not_served() {
        let mut t = DeviceTier::new(HostMemory::default(), ByteCount(4 << 20), 1 << 20);
        let (id, ns, bytes) = conformance::block(3, 10_000);
        let h = t.write(&id, &ns, &bytes).unwrap();
        assert_eq!(t.read(&h, &id).unwrap(), bytes);
        t.memory_mut().flip(h.region.0, h.offset + 77);
        match t.read(&h, &id) {
            Err(StoreError::Corrupt { id: bad, .. }) => assert_eq!(bad, id),
            other => panic!("expected Corrupt, found {other:?}"),
        }
        assert_eq!(
            t.used(),
            ByteCount(0),
            "the quarantined copy's room is given back"
        );
        assert!(t.read(&h, &id).is_err(), "its handle is dead");
    }

    #[test]
    fn regions_are_taken_as_blocks_need_them() {
        let mut t = DeviceTier::new(HostMemory::default(), ByteCount(4 << 20), 1 << 20);
        assert_eq!(t.memory_mut().regions(), 0);
        let (id, ns, bytes) = conformance::block(5, 600_000);
        t.write(&id, &ns, &bytes).unwrap();
        let (id2, ns2, bytes2) = conformance::block(6, 600_000);
        let h2 = t.write(&id2, &ns2, &bytes2).unwrap();
        assert_eq!(
            t.memory_mut().regions(),
            2,
            "the second block needs a second region"
        );
        assert_eq!(t.read(&h2, &id2).unwrap(), bytes2);
    }
}
