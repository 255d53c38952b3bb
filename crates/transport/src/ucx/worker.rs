//! [`Worker`]: the UCP worker the progress thread drives, the queue its callbacks fill, and
//! [`Waker`], the eventfd the async side rings when it has sent a command.
//!
//! The worker runs in `UCS_THREAD_MODE_SINGLE`: every UCX call on it (and on its endpoints,
//! listener and requests) is made by the one progress thread that created it. Callbacks only
//! push an [`Event`] onto the queue and return; the thread handles events after
//! `ucp_worker_progress` returns, so no protocol code ever runs inside UCX.
//!
//! Sleeping: `ucp_worker_arm` then `poll` on the worker's event fd and the waker's eventfd, with
//! a timeout (the next deadline). `UCS_ERR_BUSY` from arm means events are pending: progress
//! again instead of sleeping. Nothing spins while idle.

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::{Mutex, PoisonError};

use ucx_sys::{
    ucp_conn_request_h, ucp_worker_arm, ucp_worker_create, ucp_worker_destroy, ucp_worker_get_efd,
    ucp_worker_h, ucp_worker_params_field_UCP_WORKER_PARAM_FIELD_THREAD_MODE, ucp_worker_params_t,
    ucp_worker_progress, ucs_status_t, ucs_thread_mode_t_UCS_THREAD_MODE_SINGLE,
};

use crate::error::TransportError;
use crate::ucx::context::{check, error, Context};

/// Identifies one endpoint for its whole life; never reused within a transport.
pub(crate) type ConnId = u64;

/// Hands out [`ConnId`]s, client and server endpoints alike, so an event names one endpoint.
#[derive(Debug, Default)]
pub(crate) struct ConnIds {
    next: ConnId,
}

impl ConnIds {
    /// A fresh id.
    pub(crate) fn next(&mut self) -> ConnId {
        self.next += 1;
        self.next
    }
}

/// Which operation of an endpoint completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// Client: a request header sent.
    Request,
    /// Client: a response header received.
    Header,
    /// Client: one payload chunk received.
    Chunk,
    /// Server: request bytes received.
    Requests,
    /// Server: part of the response with this sequence number sent.
    Response(u64),
    /// Client (get mode): a lease descriptor received.
    Descriptor,
    /// Client (get mode): the one-sided read of chunk `n` of the block being read completed.
    Get(u64),
    /// Test peers ([`crate::ucx::raw`]): raw bytes sent or received.
    Raw,
    /// The endpoint's force-close completed.
    Close,
}

/// An operation: the endpoint it belongs to, and which one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpId {
    /// The endpoint.
    pub(crate) conn: ConnId,
    /// What it was.
    pub(crate) kind: OpKind,
}

/// A connection request from the listener; used only on the progress thread.
pub(crate) struct ConnRequest(pub(crate) ucp_conn_request_h);

// SAFETY: events sit in a Mutex-guarded queue, which needs `Send`; the handle inside is only
// ever passed back to UCX by the progress thread that owns the worker it came from.
unsafe impl Send for ConnRequest {}

/// What a callback reports.
pub(crate) enum Event {
    /// A send (or an endpoint close) completed, with this status.
    Sent {
        /// The operation.
        op: OpId,
        /// `UCS_OK` or why not.
        status: ucs_status_t,
    },
    /// A receive completed: `length` bytes of `buf` hold data (also on error: a partial count).
    Received {
        /// The operation.
        op: OpId,
        /// `UCS_OK` or why not.
        status: ucs_status_t,
        /// The buffer UCX wrote into, handed back.
        buf: Vec<u8>,
        /// Bytes received into it.
        length: usize,
    },
    /// A one-sided read completed (or was cancelled); `held` is what it kept alive (the block's
    /// landing buffer and the rkey), handed back so that it is released here, outside UCX.
    Got {
        /// The operation.
        op: OpId,
        /// `UCS_OK` or why not.
        status: ucs_status_t,
        /// What the operation held.
        held: crate::ucx::ops::Keep,
    },
    /// An endpoint failed (peer gone, reset, unreachable); it must be closed.
    Failed {
        /// The endpoint.
        conn: ConnId,
        /// Why.
        status: ucs_status_t,
    },
    /// A client asks to connect to the listener.
    ConnRequest(ConnRequest),
}

/// Where callbacks leave events. A Mutex, not a RefCell: sound even if UCX ever called back
/// from its async thread; uncontended in practice (one thread), so cheap.
pub(crate) type EventQueue = Mutex<VecDeque<Event>>;

/// Appends an event.
///
/// # Safety
///
/// `queue` must point at a live [`EventQueue`]: the one a [`Worker`] owns, which outlives
/// every endpoint, listener and request of that worker.
pub(crate) unsafe fn push_event(queue: *const EventQueue, event: Event) {
    // SAFETY: the caller guarantees the queue is alive.
    let queue = unsafe { &*queue };
    queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push_back(event);
}

/// The eventfd through which the async side wakes the progress thread.
#[derive(Debug)]
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A non-blocking eventfd.
    pub(crate) fn new() -> Result<Waker, TransportError> {
        // SAFETY: eventfd has no memory preconditions; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(TransportError::io(
                "creating the UCX progress thread's eventfd",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Waker {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the progress thread's next (or current) sleep return.
    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A full counter (EAGAIN)
        // still leaves the fd readable, which is all a wake needs.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears pending wakes; called before draining commands, so none is lost.
    pub(crate) fn reset(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; non-blocking, EAGAIN when clear.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }

    /// Clears pending wakes; whether there was one.
    #[cfg(test)]
    pub(crate) fn take_wake(&self) -> bool {
        let mut count: u64 = 0;
        // SAFETY: as in `reset`.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        n == 8 && count > 0
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A UCP worker, its event fd and its event queue, and the context it came from.
///
/// Field order is drop order after `Drop::drop` destroys the worker: the queue (no callback
/// can fire once the worker is gone), then the context.
pub(crate) struct Worker {
    handle: ucp_worker_h,
    efd: RawFd,
    /// Endpoints created and not yet reported closed (see [`Worker::endpoint_closed`]).
    endpoints: Cell<usize>,
    queue: Box<EventQueue>,
    _context: Context,
}

impl Worker {
    /// A single-threaded worker on a new context (made with wake-up events).
    pub(crate) fn new(context: Context) -> Result<Worker, TransportError> {
        let params = ucp_worker_params_t {
            field_mask: ucp_worker_params_field_UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64,
            thread_mode: ucs_thread_mode_t_UCS_THREAD_MODE_SINGLE,
            ..Default::default()
        };
        let mut handle: ucp_worker_h = ptr::null_mut();
        // SAFETY: the context is live; params valid for the call; `handle` receives the worker.
        check("ucp_worker_create", unsafe {
            ucp_worker_create(context.handle(), &params, &mut handle)
        })?;
        let mut efd: libc::c_int = -1;
        // SAFETY: the worker was just created (with UCP_FEATURE_WAKEUP on its context); `efd`
        // receives a descriptor the worker owns and closes.
        let status = unsafe { ucp_worker_get_efd(handle, &mut efd) };
        if status != ucs_status_t::UCS_OK {
            // SAFETY: destroy the worker we created; nothing else refers to it yet.
            unsafe { ucp_worker_destroy(handle) };
            return Err(error("ucp_worker_get_efd", status));
        }
        Ok(Worker {
            handle,
            efd,
            endpoints: Cell::new(0),
            queue: Box::new(EventQueue::default()),
            _context: context,
        })
    }

    /// The context's raw handle (for mapping memory: `ucp_mem_map`, `ucp_rkey_pack`).
    pub(crate) fn context(&self) -> ucx_sys::ucp_context_h {
        self._context.handle()
    }

    /// This worker's address (`ucp_worker_get_address`), for peers that connect to it
    /// directly: the endpoint a client reads leased blocks through.
    pub(crate) fn address(&self) -> Result<Vec<u8>, TransportError> {
        let mut addr: *mut ucx_sys::ucp_address_t = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: owned worker, progress thread; UCX allocates the address, released below.
        check("ucp_worker_get_address", unsafe {
            ucx_sys::ucp_worker_get_address(self.handle, &mut addr, &mut len)
        })?;
        // SAFETY: UCX wrote `len` bytes at `addr`; copied before the release.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) }.to_vec();
        // SAFETY: the address came from this worker and is released once.
        unsafe { ucx_sys::ucp_worker_release_address(self.handle, addr) };
        Ok(bytes)
    }

    /// The raw handle (for endpoints and the listener).
    pub(crate) fn handle(&self) -> ucp_worker_h {
        self.handle
    }

    /// The queue callbacks push to; its address is stable for the worker's life.
    pub(crate) fn queue(&self) -> *const EventQueue {
        &*self.queue
    }

    /// An endpoint was created on this worker.
    pub(crate) fn endpoint_opened(&self) {
        self.endpoints.set(self.endpoints.get() + 1);
    }

    /// An endpoint's close completed (its `OpKind::Close` event was handled).
    pub(crate) fn endpoint_closed(&self) {
        self.endpoints.set(self.endpoints.get().saturating_sub(1));
    }

    /// Endpoints whose close has not completed: shutdown waits for this to reach 0.
    pub(crate) fn endpoints(&self) -> usize {
        self.endpoints.get()
    }

    /// One round of `ucp_worker_progress`; whether anything happened.
    pub(crate) fn progress(&self) -> bool {
        // SAFETY: called on the thread that owns the worker (single-thread mode).
        unsafe { ucp_worker_progress(self.handle) != 0 }
    }

    /// Takes every pending event, oldest first.
    pub(crate) fn take_events(&self) -> VecDeque<Event> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sleeps until UCX has something, `waker` rings, or `timeout_ms` passes. Returns at once
    /// when the worker has pending events (arm says busy).
    pub(crate) fn sleep(&self, waker: &Waker, timeout_ms: i32) -> Result<(), TransportError> {
        // SAFETY: owned worker, progress thread.
        let status = unsafe { ucp_worker_arm(self.handle) };
        if status == ucs_status_t::UCS_ERR_BUSY {
            return Ok(());
        }
        check("ucp_worker_arm", status)?;
        let mut fds = [
            libc::pollfd {
                fd: self.efd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: waker.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a live array of two pollfds; both descriptors are open for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(TransportError::io("polling the UCX worker", e));
            }
        }
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: every endpoint and the listener were released before (the progress thread
        // drops them first); the worker is destroyed once, on its own thread.
        unsafe { ucp_worker_destroy(self.handle) };
    }
}
