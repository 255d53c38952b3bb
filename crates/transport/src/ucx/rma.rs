//! The client's one-sided read of a leased block (`ucx.mode = "get"`): the unpacked [`Rkey`],
//! the [`Landing`] buffer the block's bytes are read into (the verifying receiver's own
//! destination buffer, lent), and [`RmaRead`], which posts `ucp_get_nbx` chunk by chunk,
//! `recv_chunks_posted` ahead, and hands each chunk to the receipt in order as it lands.
//!
//! Where UCX can map the leased memory into this process (`ucp_rkey_ptr`: a staged lease in
//! UCX shared memory on the same host), the read is a plain copy instead: the same single
//! copy by the reader that a get would make, without UCX's per-fragment bookkeeping. A
//! verifying receipt of a block of 1 MiB and up takes it whole ([`fill_mapped`]): the
//! progress thread and one helper each copy their part of the blake3 tree out of the mapping
//! piece by piece and hash each piece in cache. Otherwise ([`RmaRead::copy_direct`]) it is
//! copied chunk by chunk into the landing buffer, each chunk hashed right after it is copied
//! (measured: see the crate docs).
//!
//! Ownership, the rule of `ops`: every get's context holds an `Arc` of the landing buffer and
//! of the rkey ([`Keep::Get`]); UCX hands the context back through `on_got` (completed or
//! cancelled by a force-close), and only the event handler drops it. So a read abandoned
//! mid-way (timeout, dropped future, dead peer) frees neither the buffer UCX writes into nor
//! the rkey it reads with until the last get is done with them, and a buffer that did not
//! fill completely is never handed to the receipt as a block.

use std::cell::UnsafeCell;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ucx_sys::{
    ucp_ep_rkey_unpack, ucp_get_nbx, ucp_op_attr_t_UCP_OP_ATTR_FIELD_CALLBACK,
    ucp_op_attr_t_UCP_OP_ATTR_FIELD_USER_DATA, ucp_request_param_t, ucp_rkey_destroy, ucp_rkey_h,
    ucp_rkey_ptr, ucs_status_t,
};

use crate::error::TransportError;
use crate::lease::LeaseDescriptor;
use crate::ucx::context::check;
use crate::ucx::endpoint::Endpoint;
use crate::ucx::ops::{on_got, settle, Keep, OpCtx};
use crate::ucx::receipt::Receipt;
use crate::ucx::worker::OpKind;

/// An rkey unpacked for one endpoint; destroyed on drop (on the progress thread, once no get
/// holds it).
pub(crate) struct Rkey(ucp_rkey_h);

// SAFETY: an `Arc<Rkey>` sits in operation contexts that move between the progress thread's
// structures and its event queue (a Mutex, which needs `Send`); it is created, used and
// destroyed by that one thread only.
unsafe impl Send for Rkey {}
// SAFETY: as above; no method reads it from another thread.
unsafe impl Sync for Rkey {}

impl Rkey {
    /// Unpacks `packed` (from a lease descriptor) for `ep`.
    pub(crate) fn unpack(ep: &Endpoint, packed: &[u8]) -> Result<Rkey, TransportError> {
        let mut rkey: ucp_rkey_h = ptr::null_mut();
        // SAFETY: the endpoint is open; `packed` is live for the call (UCX copies what it
        // needs); `rkey` receives the handle.
        check("ucp_ep_rkey_unpack", unsafe {
            ucp_ep_rkey_unpack(ep.handle(), packed.as_ptr().cast(), &mut rkey)
        })?;
        Ok(Rkey(rkey))
    }

    /// Where `remote_addr` is mapped in this process, if UCX can map it (`ucp_rkey_ptr`:
    /// shared-memory transports); `None` otherwise (reads then go through gets).
    fn local_ptr(&self, remote_addr: u64) -> Option<*const u8> {
        let mut ptr: *mut std::ffi::c_void = ptr::null_mut();
        // SAFETY: a live rkey; `ptr` receives an address (only on UCS_OK).
        let status = unsafe { ucp_rkey_ptr(self.0, remote_addr, &mut ptr) };
        (status == ucs_status_t::UCS_OK && !ptr.is_null()).then_some(ptr.cast_const().cast())
    }
}

impl Drop for Rkey {
    fn drop(&mut self) {
        // SAFETY: unpacked by us, destroyed once; no get uses it any more (each holds an Arc),
        // and the worker outlives every operation context (they are released before it).
        unsafe { ucp_rkey_destroy(self.0) };
    }
}

/// Most rkeys a connection keeps unpacked (then it starts over).
const RKEYS_CACHED_MAX: usize = 64;

/// The rkeys one read endpoint has unpacked, by their packed bytes. A staging server leases
/// the same few regions again and again with the same rkey; keeping it unpacked keeps UCX's
/// attachment of that shared memory, whose pages would otherwise fault in afresh for every
/// block (measured: most of the client's CPU on a shared-memory read).
#[derive(Default)]
pub(crate) struct Rkeys {
    unpacked: std::collections::HashMap<Vec<u8>, Arc<Rkey>>,
}

impl Rkeys {
    /// The rkey packed as `packed`, unpacked for `ep` if it is not yet.
    pub(crate) fn get(
        &mut self,
        ep: &Endpoint,
        packed: &[u8],
    ) -> Result<Arc<Rkey>, TransportError> {
        if let Some(rkey) = self.unpacked.get(packed) {
            return Ok(rkey.clone());
        }
        if self.unpacked.len() >= RKEYS_CACHED_MAX {
            self.unpacked.clear();
        }
        let rkey = Arc::new(Rkey::unpack(ep, packed)?);
        self.unpacked.insert(packed.to_vec(), rkey.clone());
        Ok(rkey)
    }
}

/// The buffer one block is read into: allocated (not initialised) to the block's length; gets
/// write disjoint chunks of it through a raw pointer, completed chunks are read in place.
pub(crate) struct Landing {
    buf: UnsafeCell<Vec<u8>>,
    base: *mut u8,
    len: usize,
}

// SAFETY: shared between the read and its gets' contexts, all on the progress thread (the
// contexts pass through the Mutex-guarded event queue, which needs `Send + Sync` for the Arc).
unsafe impl Send for Landing {}
// SAFETY: as above.
unsafe impl Sync for Landing {}

impl Landing {
    /// Lands `len` bytes in `buf` (its capacity is reused if large enough).
    pub(crate) fn new(mut buf: Vec<u8>, len: usize) -> Arc<Landing> {
        buf.clear();
        if buf.capacity() < len {
            buf = Vec::with_capacity(len);
        }
        let base = buf.as_mut_ptr();
        Arc::new(Landing {
            buf: UnsafeCell::new(buf),
            base,
            len,
        })
    }

    /// Bytes `start..end`.
    ///
    /// # Safety
    ///
    /// Every byte of the range was written by a get that has completed, and no get posted
    /// now writes into it.
    unsafe fn landed(&self, start: usize, end: usize) -> &[u8] {
        debug_assert!(start <= end && end <= self.len);
        // SAFETY: in bounds of the allocation (capacity ≥ len); initialised and not being
        // written, as the caller guarantees.
        unsafe { std::slice::from_raw_parts(self.base.add(start), end - start) }
    }

    /// The full buffer, once no get holds it.
    ///
    /// # Safety
    ///
    /// Every one of its `len` bytes landed.
    unsafe fn into_full(this: Arc<Landing>) -> Option<Vec<u8>> {
        let landing = Arc::try_unwrap(this).ok()?;
        let mut buf = landing.buf.into_inner();
        // SAFETY: capacity ≥ len, and the caller guarantees all `len` bytes are initialised.
        unsafe { buf.set_len(landing.len) };
        Some(buf)
    }
}

/// A leased block mapped into this process, read by two threads at once.
struct Mapped {
    src: *const u8,
    len: usize,
}

// SAFETY: only read (by the progress thread and the scoped hashing helper), never written by
// this process; the mapping outlives the scope (the rkey, held by the caller, keeps it).
unsafe impl Sync for Mapped {}

/// Where `lease` is mapped into this process through `rkey` (a staged lease in shared memory
/// on this host), offers the whole block to `receipt` to be filled at once by copies out of
/// the mapping ([`Receipt::fill_whole`]); `true` if it took it. Otherwise (not mapped here, or
/// a receipt that does not take whole blocks) nothing was read and the caller reads the block
/// chunk by chunk with [`RmaRead`].
pub(crate) fn fill_mapped(rkey: &Rkey, lease: &LeaseDescriptor, receipt: &mut dyn Receipt) -> bool {
    let Some(src) = rkey.local_ptr(lease.remote_addr) else {
        return false;
    };
    let mapped = Mapped {
        src,
        len: lease.block_len as usize,
    };
    let mapped = &mapped;
    let fill = move |piece: &mut [MaybeUninit<u8>], at: usize| -> Result<(), Infallible> {
        assert!(
            at <= mapped.len && piece.len() <= mapped.len - at,
            "a piece within the block"
        );
        // SAFETY: `src` maps the block's `len` readable bytes (as for `CopyJob::copy`), alive
        // for the call; the piece is in bounds (checked) and ours to write. The server may
        // rewrite its side (a lease ended early): then the bytes fail verification.
        unsafe {
            ptr::copy_nonoverlapping(
                mapped.src.add(at),
                piece.as_mut_ptr().cast::<u8>(),
                piece.len(),
            )
        };
        Ok(())
    };
    // SAFETY: `fill` writes every byte of each piece before returning Ok.
    unsafe { receipt.fill_whole(&fill) }
}

/// A direct read's copies: from the leased block mapped here into the landing buffer.
struct CopyJob {
    src: *const u8,
    dst: *mut u8,
    len: u64,
    chunk: u64,
}

// SAFETY: shared with the scoped copier thread for one direct read; both buffers outlive the
// scope (the read holds the rkey, whose mapping `src` is, and the landing buffer), and the
// copier writes only chunks the other thread does not read until published.
unsafe impl Sync for CopyJob {}

impl CopyJob {
    /// Copies chunk `n`; its byte range.
    ///
    /// # Safety
    ///
    /// `src` maps `len` readable bytes and `dst` has room for `len`, both alive for the call;
    /// nobody else writes or reads chunk `n` of `dst` meanwhile. The server may rewrite its
    /// side (a lease ended early): then the bytes fail verification.
    unsafe fn copy(&self, n: u64) -> (usize, usize) {
        let start = n * self.chunk;
        let (start, end) = (start as usize, (start + self.chunk).min(self.len) as usize);
        // SAFETY: in bounds of both buffers, per the caller's promise.
        unsafe { ptr::copy_nonoverlapping(self.src.add(start), self.dst.add(start), end - start) };
        (start, end)
    }
}

/// The one-sided read of one leased block, chunk by chunk.
pub(crate) struct RmaRead {
    landing: Arc<Landing>,
    rkey: Arc<Rkey>,
    remote_addr: u64,
    len: u64,
    chunk: u64,
    chunks: u64,
    /// Next chunk to post.
    next_post: u64,
    /// Posted and not completed.
    in_flight: usize,
    /// Completed, not yet handed on (they completed ahead of an earlier one).
    done: BTreeSet<u64>,
    /// Next chunk to hand on, in order.
    next_hand: u64,
    /// The leased block mapped into this process, when UCX can map it (then no gets).
    direct: Option<*const u8>,
}

impl RmaRead {
    /// A read of `lease` with `rkey` (unpacked from it) into `buf` (a destination lent by the
    /// receipt, or an empty Vec), in gets of `chunk` bytes.
    pub(crate) fn start(
        rkey: Arc<Rkey>,
        lease: &LeaseDescriptor,
        buf: Vec<u8>,
        chunk: usize,
    ) -> Result<RmaRead, TransportError> {
        let direct = rkey.local_ptr(lease.remote_addr);
        let chunk = chunk.max(1) as u64;
        Ok(RmaRead {
            landing: Landing::new(buf, lease.block_len as usize),
            rkey,
            remote_addr: lease.remote_addr,
            len: lease.block_len,
            chunk,
            chunks: lease.block_len.div_ceil(chunk),
            next_post: 0,
            in_flight: 0,
            done: BTreeSet::new(),
            next_hand: 0,
            direct,
        })
    }

    /// Whether the block is mapped here ([`RmaRead::copy_direct`] reads it, no gets).
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Reads the whole block from its local mapping: each chunk copied into the landing
    /// buffer, then handed to `hand` (in order, while in cache). With `copy_thread`, a helper
    /// thread copies ahead while this thread hands chunks on as they are copied (hashing
    /// chunk k while chunk k+1 is copied). Stops at `hand`'s first error. Does nothing unless
    /// [`RmaRead::is_direct`].
    pub(crate) fn copy_direct<E>(
        &mut self,
        copy_thread: bool,
        mut hand: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(src) = self.direct else {
            return Ok(());
        };
        let job = CopyJob {
            src,
            dst: self.landing.base,
            len: self.len,
            chunk: self.chunk,
        };
        self.next_post = self.chunks;
        if !copy_thread || self.chunks < 2 {
            while self.next_hand < self.chunks {
                // SAFETY: see `CopyJob::copy`; chunk `next_hand` is copied once.
                let (start, end) = unsafe { job.copy(self.next_hand) };
                self.next_hand += 1;
                // SAFETY: just written, and nothing else writes it.
                hand(unsafe { self.landing.landed(start, end) })?;
            }
            return Ok(());
        }
        let copied = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let chunks = self.chunks;
        std::thread::scope(|scope| {
            let (job, copied, stop) = (&job, &copied, &stop);
            let copier = std::thread::Builder::new()
                .name("ucx-read-copy".into())
                .spawn_scoped(scope, move || {
                    for n in 0..chunks {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        // SAFETY: see `CopyJob::copy`; each chunk is copied once, here.
                        unsafe { job.copy(n) };
                        copied.store(n + 1, Ordering::Release);
                    }
                });
            if copier.is_err() {
                // No thread: copy here, as without `copy_thread`.
                copied.store(0, Ordering::Relaxed);
                for n in 0..chunks {
                    // SAFETY: see `CopyJob::copy`; the copier never started.
                    unsafe { job.copy(n) };
                }
                copied.store(chunks, Ordering::Release);
            }
            while self.next_hand < chunks {
                let mut spins = 0u32;
                while copied.load(Ordering::Acquire) <= self.next_hand {
                    spins += 1;
                    if spins < 1_000 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                let (start, end) = self.range(self.next_hand);
                self.next_hand += 1;
                // SAFETY: the copier published this chunk (Release/Acquire) and never touches
                // it again; other chunks it writes are disjoint.
                if let Err(e) = hand(unsafe { self.landing.landed(start, end) }) {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
            Ok(())
        })
    }

    /// Bytes landed and handed on so far (for error messages).
    pub(crate) fn landed_bytes(&self) -> u64 {
        (self.next_hand * self.chunk).min(self.len)
    }

    /// The block's length.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    fn range(&self, n: u64) -> (usize, usize) {
        let start = n * self.chunk;
        (start as usize, (start + self.chunk).min(self.len) as usize)
    }

    /// Keeps up to `ahead` gets posted (none on a direct read). Completions (even immediate
    /// ones) arrive as events.
    pub(crate) fn post(&mut self, ep: &Endpoint, ahead: usize) {
        while self.direct.is_none() && self.in_flight < ahead && self.next_post < self.chunks {
            let n = self.next_post;
            self.next_post += 1;
            self.in_flight += 1;
            let (start, end) = self.range(n);
            let (op, queue) = ep.op(OpKind::Get(n));
            let ctx = Box::into_raw(Box::new(OpCtx {
                queue,
                op,
                keep: Keep::Get(self.landing.clone(), self.rkey.clone()),
            }));
            let mut param = ucp_request_param_t {
                op_attr_mask: ucp_op_attr_t_UCP_OP_ATTR_FIELD_CALLBACK
                    | ucp_op_attr_t_UCP_OP_ATTR_FIELD_USER_DATA,
                user_data: ctx.cast(),
                ..Default::default()
            };
            param.cb.send = Some(on_got);
            // SAFETY: the chunk lies inside the landing buffer's allocation, which `ctx` keeps
            // alive (with the rkey) until UCX hands the context back; no other get writes
            // these bytes and nothing reads them before this get completes. The endpoint is
            // open (closing consumes it).
            let ret = unsafe {
                ucp_get_nbx(
                    ep.handle(),
                    self.landing.base.add(start).cast(),
                    end - start,
                    self.remote_addr + start as u64,
                    self.rkey.0,
                    &param,
                )
            };
            // SAFETY: `ctx` is the user_data of this call.
            unsafe { settle(ret, ctx, None) };
        }
    }

    /// Get `n` completed successfully: hands every chunk now landed in order to `hand` (each
    /// as a slice of the landing buffer). Stops at `hand`'s first error.
    pub(crate) fn completed<E>(
        &mut self,
        n: u64,
        mut hand: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.in_flight = self.in_flight.saturating_sub(1);
        if n >= self.next_hand && n < self.next_post {
            self.done.insert(n);
        }
        while self.done.remove(&self.next_hand) {
            let (start, end) = self.range(self.next_hand);
            self.next_hand += 1;
            // SAFETY: chunk `next_hand` completed (it was in `done`) and is never posted again.
            hand(unsafe { self.landing.landed(start, end) })?;
        }
        Ok(())
    }

    /// Whether every chunk landed and was handed on.
    pub(crate) fn is_complete(&self) -> bool {
        self.next_hand == self.chunks
    }

    /// The full buffer, once complete and no get holds it any more.
    pub(crate) fn into_buffer(self) -> Option<Vec<u8>> {
        if !self.is_complete() || self.in_flight != 0 {
            return None;
        }
        // SAFETY: every chunk landed (complete), so every byte of the buffer is initialised.
        unsafe { Landing::into_full(self.landing) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_landing_reuses_a_large_enough_buffer_and_yields_it_only_unshared() {
        let buf = Vec::with_capacity(100);
        let ptr = buf.as_ptr();
        let landing = Landing::new(buf, 64);
        assert_eq!(landing.base.cast_const(), ptr, "capacity reused");
        let held = landing.clone();
        // SAFETY: the test writes every byte before claiming the buffer.
        unsafe { ptr::write_bytes(landing.base, 7, 64) };
        // SAFETY: all 64 bytes written.
        assert!(
            unsafe { Landing::into_full(landing) }.is_none(),
            "still held"
        );
        // SAFETY: as above.
        let full = unsafe { Landing::into_full(held) }.expect("unshared");
        assert_eq!(full, vec![7u8; 64]);
        let small = Landing::new(Vec::new(), 10);
        assert!(small.len == 10 && !small.base.is_null());
    }
}
