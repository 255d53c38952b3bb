//! The server's side of the one-sided read mode: [`MappedBlock`], a leased block's memory
//! mapped for the client to read and its packed rkey; [`Staging`], the UCX-allocated regions
//! blocks are copied into when `ucx.stage_leases` is on; and [`Leases`], the ones one
//! connection holds.
//!
//! In place (the default), a lease maps the source's `Bytes` where they lie (`ucp_mem_map` of
//! the existing address and length) and keeps them and the memory handle alive; dropping it
//! unmaps, then lets the bytes go. Staged, the block is copied into a region UCX allocated
//! (`UCP_MEM_MAP_ALLOCATE`: shared memory when `tls` has `sysv`/`posix`), whose rkey was
//! packed once; dropping the lease gives the region back for the next one. UCX 1.13 serves a
//! one-sided read from another process on the same host only out of such memory (its CMA
//! transport does not do user gets, and other memory is read through emulation over TCP). It ends when the client sends `Release`
//! for that block, when its connection ends, or after `fetch_timeout_ms` (counted as expired).
//! Ending a lease early can only make the client's reads fail or read bytes that no longer
//! hash to the block (it verifies): the server's memory is only ever read.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kvfabric_store::BlockId;
use ucx_sys::{
    ucp_context_h, ucp_mem_attr_field_UCP_MEM_ATTR_FIELD_ADDRESS,
    ucp_mem_attr_field_UCP_MEM_ATTR_FIELD_LENGTH, ucp_mem_attr_t, ucp_mem_h, ucp_mem_map,
    ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_ADDRESS,
    ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_FLAGS,
    ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_LENGTH,
    ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_PROT, ucp_mem_map_params_t, ucp_mem_query,
    ucp_mem_unmap, ucp_rkey_buffer_release, ucp_rkey_pack, UCP_MEM_MAP_ALLOCATE,
    UCP_MEM_MAP_PROT_LOCAL_READ, UCP_MEM_MAP_PROT_LOCAL_WRITE, UCP_MEM_MAP_PROT_REMOTE_READ,
};

use crate::counters::TransportCounters;
use crate::error::TransportError;
use crate::lease::{LeaseDescriptor, RKEY_BYTES_MAX};
use crate::ucx::context::check;
use crate::ucx::worker::Worker;

/// Staged regions are allocated in multiples of this (so that one fits blocks of nearby
/// sizes and is reused).
const REGION_GRANULE_BYTES: usize = 1 << 20;

/// One `ucp_mem_map` (in place or allocated); unmapped on drop.
struct Mapping {
    context: ucp_context_h,
    memh: ucp_mem_h,
}

impl Mapping {
    /// Maps `len` bytes at `address` for the peer to read, or (null `address`) has UCX
    /// allocate them; the mapping, its address and its length.
    ///
    /// # Safety
    ///
    /// A non-null `address..address+len` is live memory that outlives the mapping.
    unsafe fn new(
        context: ucp_context_h,
        address: *const u8,
        len: usize,
    ) -> Result<(Mapping, *mut u8, usize), TransportError> {
        let allocate = address.is_null();
        let mut params = ucp_mem_map_params_t {
            field_mask: (ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                | ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_PROT)
                as u64,
            address: address.cast_mut().cast(),
            length: len,
            prot: UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_REMOTE_READ,
            ..Default::default()
        };
        if allocate {
            params.field_mask |= ucp_mem_map_params_field_UCP_MEM_MAP_PARAM_FIELD_FLAGS as u64;
            params.flags = UCP_MEM_MAP_ALLOCATE;
            params.prot |= UCP_MEM_MAP_PROT_LOCAL_WRITE;
        }
        let mut memh: ucp_mem_h = ptr::null_mut();
        // SAFETY: the context is live; the range is live memory (the caller's promise) or
        // allocated by UCX. UCX maps existing memory without writing to it.
        check("ucp_mem_map", unsafe {
            ucp_mem_map(context, &params, &mut memh)
        })?;
        let mapping = Mapping { context, memh };
        let mut attr = ucp_mem_attr_t {
            field_mask: (ucp_mem_attr_field_UCP_MEM_ATTR_FIELD_ADDRESS
                | ucp_mem_attr_field_UCP_MEM_ATTR_FIELD_LENGTH) as u64,
            ..Default::default()
        };
        // SAFETY: a live memory handle; `attr` is writable.
        check("ucp_mem_query", unsafe { ucp_mem_query(memh, &mut attr) })?;
        if attr.address.is_null() || attr.length < len {
            return Err(TransportError::Fabric {
                fabric: "UCX",
                call: "ucp_mem_query",
                reason: format!(
                    "expected a mapping of at least {len} bytes, found {} at {:p}",
                    attr.length, attr.address
                ),
            });
        }
        Ok((mapping, attr.address.cast(), attr.length))
    }

    /// The packed rkey, copied out of UCX's buffer; refused above [`RKEY_BYTES_MAX`].
    fn pack(&self) -> Result<Vec<u8>, TransportError> {
        let mut packed: *mut std::ffi::c_void = ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: context and memh are live; UCX allocates the buffer, released below.
        check("ucp_rkey_pack", unsafe {
            ucp_rkey_pack(self.context, self.memh, &mut packed, &mut size)
        })?;
        // SAFETY: UCX wrote `size` bytes at `packed`; copied before the release.
        let rkey = unsafe { std::slice::from_raw_parts(packed.cast::<u8>(), size) }.to_vec();
        // SAFETY: the buffer came from ucp_rkey_pack and is released once.
        unsafe { ucp_rkey_buffer_release(packed) };
        if !(1..=RKEY_BYTES_MAX).contains(&rkey.len()) {
            return Err(TransportError::Fabric {
                fabric: "UCX",
                call: "ucp_rkey_pack",
                reason: format!(
                    "expected a packed rkey of 1..={RKEY_BYTES_MAX} bytes, found {}",
                    rkey.len()
                ),
            });
        }
        Ok(rkey)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped by us, unmapped once, on the progress thread, before the worker and
        // its context are destroyed (servers are dropped first).
        let status = unsafe { ucp_mem_unmap(self.context, self.memh) };
        if let Err(e) = check("ucp_mem_unmap", status) {
            tracing::warn!(error = %e, "unmapping a leased block failed");
        }
    }
}

/// A region UCX allocated, with its rkey packed once.
struct Region {
    _mapping: Mapping,
    addr: *mut u8,
    len: usize,
    rkey: Vec<u8>,
}

/// The idle staged regions of one transport, reused from lease to lease (at most `idle_max`
/// kept; more are unmapped as their leases end).
pub(crate) struct Staging {
    idle: Vec<Region>,
    idle_max: usize,
}

impl Staging {
    /// A pool keeping at most `idle_max` idle regions.
    pub(crate) fn new(idle_max: usize) -> Rc<RefCell<Staging>> {
        Rc::new(RefCell::new(Staging {
            idle: Vec::new(),
            idle_max,
        }))
    }

    /// An idle region of at least `len` bytes, or a new one.
    fn take(&mut self, context: ucp_context_h, len: usize) -> Result<Region, TransportError> {
        if let Some(i) = self.idle.iter().position(|r| r.len >= len) {
            return Ok(self.idle.swap_remove(i));
        }
        let size = len.div_ceil(REGION_GRANULE_BYTES) * REGION_GRANULE_BYTES;
        // SAFETY: a null address asks UCX to allocate.
        let (mapping, addr, len) = unsafe { Mapping::new(context, ptr::null(), size) }?;
        let rkey = mapping.pack()?;
        Ok(Region {
            _mapping: mapping,
            addr,
            len,
            rkey,
        })
    }

    fn give_back(&mut self, region: Region) {
        if self.idle.len() < self.idle_max {
            self.idle.push(region);
        }
    }
}

/// What a lease keeps mapped.
enum Memory {
    /// The source's bytes, mapped where they lie (dropped after the mapping: field order).
    InPlace(#[allow(dead_code)] Mapping, #[allow(dead_code)] Bytes),
    /// A staged copy, given back to the pool on drop.
    Staged(Option<Region>, Rc<RefCell<Staging>>),
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Memory::Staged(region, pool) = self {
            if let Some(region) = region.take() {
                pool.borrow_mut().give_back(region);
            }
        }
    }
}

/// One block mapped for a client to read, until dropped.
pub(crate) struct MappedBlock {
    id: BlockId,
    len: u64,
    granted: Instant,
    counters: Arc<TransportCounters>,
    _memory: Memory,
}

impl MappedBlock {
    /// Maps `bytes` for the peer to read — in place, or copied into a region of `staging`
    /// when given — and packs its rkey; the descriptor to send, which carries
    /// `worker_address` (this worker's, for the client's read endpoint).
    pub(crate) fn map(
        worker: &Worker,
        worker_address: &[u8],
        id: BlockId,
        bytes: Bytes,
        staging: Option<&Rc<RefCell<Staging>>>,
        counters: Arc<TransportCounters>,
    ) -> Result<(MappedBlock, LeaseDescriptor), TransportError> {
        let context = worker.context();
        let len = bytes.len();
        let (memory, addr, rkey) = match staging {
            None => {
                // SAFETY: the bytes are live and kept (after the mapping) by the lease.
                let (mapping, addr, _) = unsafe { Mapping::new(context, bytes.as_ptr(), len) }?;
                let rkey = mapping.pack()?;
                (Memory::InPlace(mapping, bytes), addr, rkey)
            }
            Some(pool) => {
                let region = pool.borrow_mut().take(context, len)?;
                // SAFETY: the region is UCX memory of at least `len` bytes that this lease
                // alone holds (idle regions are in the pool, leased ones in one lease).
                unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), region.addr, len) };
                let (addr, rkey) = (region.addr, region.rkey.clone());
                (Memory::Staged(Some(region), pool.clone()), addr, rkey)
            }
        };
        counters.lease_granted();
        let block = MappedBlock {
            id,
            len: len as u64,
            granted: Instant::now(),
            counters,
            _memory: memory,
        };
        let descriptor = LeaseDescriptor {
            block_len: len as u64,
            remote_addr: addr as u64,
            rkey,
            worker_address: worker_address.to_vec(),
        };
        Ok((block, descriptor))
    }
}

impl Drop for MappedBlock {
    fn drop(&mut self) {
        self.counters.lease_ended();
    }
}

/// The leases of one server connection, oldest first.
#[derive(Default)]
pub(crate) struct Leases {
    held: VecDeque<MappedBlock>,
}

impl Leases {
    /// Leases held.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// Keeps `block` until released or expired.
    pub(crate) fn hold(&mut self, block: MappedBlock) {
        self.held.push_back(block);
    }

    /// The client is done reading `id`: ends its oldest lease of it; the block's length, or
    /// `None` if it held none (expired meanwhile, or a confused client).
    pub(crate) fn release(&mut self, id: BlockId) -> Option<u64> {
        let i = self.held.iter().position(|b| b.id == id)?;
        self.held.remove(i).map(|b| b.len)
    }

    /// Ends the leases granted `ttl` or more before `now`; how many.
    pub(crate) fn expire(&mut self, now: Instant, ttl: Duration) -> usize {
        let mut n = 0;
        while self.held.front().is_some_and(|b| now >= b.granted + ttl) {
            self.held.pop_front();
            n += 1;
        }
        n
    }

    /// When the oldest lease expires, if one is held.
    pub(crate) fn next_expiry(&self, ttl: Duration) -> Option<Instant> {
        self.held.front().map(|b| b.granted + ttl)
    }
}
