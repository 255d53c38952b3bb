//! The device tier's bookkeeping, apart from the device: [`DeviceTier`] places blocks in
//! regions of device memory (first fit, by the shared [`RegionBook`]), remembers each block's
//! namespace and verifies every read-back against the block's id, over any [`DeviceMemory`].
//!
//! A read need not hold the tier: [`DeviceTier`]'s [`TierBackend::device_read`] hands out a
//! [`DeviceRead`] (the block's region, shared, and where the block sits in it) that copies the
//! bytes off the device piece by piece on two threads, hashing each piece while it is in cache
//! ([`crate::hash_parallel`]), on the caller's thread, while the store serves other requests.
//!
//! The GPU tier is this over CUDA memory (`gpu::CudaMemory`, the `cuda` feature). With the
//! `testing` feature, [`HostMemory`] puts the same tier over plain host buffers, so that the
//! tier's rules and the store's GPU placement policy are tested on machines with no device;
//! no configuration can choose it (only [`crate::Store::open_with`] takes a backend).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::error::StoreError;
use crate::handle::{Handle, Tier};
use crate::hash_parallel::fill_and_hash;
use crate::id::{BlockId, NamespaceKey};
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

    /// Region `region`, shared, for reads that copy out of it without the tier.
    fn region(&self, region: u32) -> Result<Arc<dyn RegionCopyOut>, StoreError>;
}

/// One region of device memory, read from any thread (copies of disjoint or equal ranges may
/// run at once; the tier never writes a range a read may be copying: the store pins a slot
/// being read, and a pinned slot is neither freed nor moved).
pub trait RegionCopyOut: Send + Sync {
    /// Copies `out.len()` bytes at `offset` into `out`, every byte written on `Ok`; the copy is
    /// complete on return.
    fn copy_out(&self, offset: u64, out: &mut [MaybeUninit<u8>]) -> Result<(), StoreError>;
}

/// A device block's read that runs without the tier or the store ([`TierBackend::device_read`]).
pub struct DeviceRead {
    region: Arc<dyn RegionCopyOut>,
    region_index: u32,
    offset: u64,
    len: usize,
    namespace: NamespaceKey,
}

impl DeviceRead {
    /// Copies the block off the device and checks it against `id`: the bytes, or
    /// [`StoreError::HashMismatch`] (the store then reads it again under its lock, which
    /// quarantines what still does not verify).
    pub fn run(&self, id: &BlockId) -> Result<Vec<u8>, StoreError> {
        let (bytes, found) = self.copy_and_hash()?;
        if found != *id {
            return Err(StoreError::HashMismatch { id: *id, found });
        }
        Ok(bytes)
    }

    /// The bytes and their id under the block's namespace.
    fn copy_and_hash(&self) -> Result<(Vec<u8>, BlockId), StoreError> {
        let fill = |piece: &mut [MaybeUninit<u8>], at: usize| {
            self.region.copy_out(self.offset + at as u64, piece)
        };
        // SAFETY: `copy_out` writes every byte of the piece before returning Ok.
        unsafe { fill_and_hash(&self.namespace, self.len, &fill) }
    }
}

impl std::fmt::Debug for DeviceRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRead")
            .field("region", &self.region_index)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
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
        let read = self.detached(handle)?;
        let (out, found) = read.copy_and_hash()?;
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

    fn device_read(&self, handle: &Handle) -> Result<Option<DeviceRead>, StoreError> {
        self.detached(handle).map(Some)
    }
}

impl<M: DeviceMemory> DeviceTier<M> {
    /// The read of a live block at `handle`, to run with or without the tier.
    fn detached(&self, handle: &Handle) -> Result<DeviceRead, StoreError> {
        self.book.check(handle)?;
        let namespace = self.namespaces[&(handle.region.0, handle.offset)];
        Ok(DeviceRead {
            region: self.memory.region(handle.region.0)?,
            region_index: handle.region.0,
            offset: handle.offset,
            len: handle.len.as_usize(),
            namespace,
        })
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

    fn region(&self, region: u32) -> Result<Arc<dyn RegionCopyOut>, StoreError> {
        if region as usize >= self.regions() {
            return Err(StoreError::Gpu(format!("no region {region}")));
        }
        Ok(Arc::new(HostRegion {
            memory: self.clone(),
            region,
        }))
    }
}

/// One region of [`HostMemory`].
#[cfg(any(test, feature = "testing"))]
struct HostRegion {
    memory: HostMemory,
    region: u32,
}

#[cfg(any(test, feature = "testing"))]
impl RegionCopyOut for HostRegion {
    fn copy_out(&self, offset: u64, out: &mut [MaybeUninit<u8>]) -> Result<(), StoreError> {
        self.memory.range(self.region, offset, out.len(), |src| {
            // SAFETY: `src` and `out` are `out.len()` bytes each and do not overlap (one is
            // the memory's, the other the caller's).
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr().cast(), out.len())
            }
        })
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

    /// A read handed out by the tier runs without it, on the one-thread path and the
    /// two-thread one, and a damaged byte is a mismatch, not bytes.
    #[test]
    fn a_detached_read_copies_and_verifies_without_the_tier() {
        let mut t = DeviceTier::new(HostMemory::default(), ByteCount(16 << 20), 8 << 20);
        for (seed, len) in [(7, 300_000), (8, 3 << 20)] {
            let (id, ns, bytes) = conformance::block(seed, len);
            let h = t.write(&id, &ns, &bytes).unwrap();
            let read = t
                .device_read(&h)
                .unwrap()
                .expect("a device tier reads detached");
            let copied = std::thread::spawn(move || read.run(&id)).join().unwrap();
            assert!(copied.unwrap() == bytes, "{len} bytes back as written");
            t.memory_mut().flip(h.region.0, h.offset + len as u64 - 1);
            match t.device_read(&h).unwrap().unwrap().run(&id) {
                Err(StoreError::HashMismatch { id: bad, .. }) => assert_eq!(bad, id),
                other => panic!("expected HashMismatch, found {other:?}"),
            }
        }
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
