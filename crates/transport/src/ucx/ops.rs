//! What UCX holds while an operation runs, and the `extern "C"` callbacks that give it back.
//!
//! Lifetimes, the rule that makes the UCX transport sound: every buffer UCX may read or write
//! is owned by the heap context of the operation that uses it ([`OpCtx`], passed as
//! `user_data`). UCX calls the operation's callback exactly once; only then is the context
//! freed and the buffer handed back in the [`Event`]. An operation that completes (or fails) at
//! once is reported the same way, by [`settle`] pushing its event directly. So a fetch that
//! times out, or an endpoint closed with receives still posted, can never leave UCX writing
//! into freed memory: the buffers live until UCX says it is done with them (force-closing an
//! endpoint cancels its requests, which calls their callbacks). A one-sided read (`rma`) is the
//! same: each get's context holds the block's landing buffer and the rkey ([`Keep::Get`]) and
//! hands them back in [`Event::Got`]. An endpoint's error-handler
//! context ([`EpCtx`]) likewise lives until the endpoint's close completes: the close
//! operation owns it.

use std::ffi::c_void;

use bytes::Bytes;
use ucx_sys::{
    ucp_ep_h, ucp_request_free, ucs_ptr_is_err, ucs_ptr_status, ucs_status_ptr_t, ucs_status_t,
};

use std::sync::Arc;

use crate::frame::FRAME_HEADER_LEN;
use crate::ucx::rma::{Landing, Rkey};
use crate::ucx::worker::{push_event, ConnId, Event, EventQueue, OpId};

/// What an operation keeps alive until UCX completes it.
pub(crate) enum Keep {
    /// A request or response header being sent.
    Header(Box<[u8; FRAME_HEADER_LEN]>),
    /// A block's bytes being sent (shared with the source, not copied).
    Bytes(Bytes),
    /// Raw bytes being sent (test peers) or a receive buffer.
    Buf(Vec<u8>),
    /// An endpoint's error-handler context, while the endpoint closes (held, never read).
    Endpoint(#[allow(dead_code)] Box<EpCtx>),
    /// A one-sided read: the block's landing buffer it writes into and the rkey it reads
    /// with, both shared with the read's other chunks (held, handed back in [`Event::Got`]).
    Get(
        #[allow(dead_code)] Arc<Landing>,
        #[allow(dead_code)] Arc<Rkey>,
    ),
}

/// The heap context of one posted operation (`user_data` of its callback).
pub(crate) struct OpCtx {
    pub(crate) queue: *const EventQueue,
    pub(crate) op: OpId,
    pub(crate) keep: Keep,
}

/// The error-handler context of one endpoint.
pub(crate) struct EpCtx {
    pub(crate) queue: *const EventQueue,
    pub(crate) conn: ConnId,
}

/// Send (and endpoint-close) completion.
///
/// # Safety
///
/// Called by UCX once per request posted with an [`OpCtx`] as `user_data`.
pub(crate) unsafe extern "C" fn on_sent(
    request: *mut c_void,
    status: ucs_status_t,
    user_data: *mut c_void,
) {
    // SAFETY: `user_data` is the Box<OpCtx> leaked when this request was posted; UCX calls
    // back once, so the box is reclaimed once. Its queue outlives every request (Worker).
    let ctx = unsafe { Box::from_raw(user_data.cast::<OpCtx>()) };
    // SAFETY: as above, the queue is alive.
    unsafe { push_event(ctx.queue, Event::Sent { op: ctx.op, status }) };
    drop(ctx);
    // SAFETY: the request is complete and ours to release; UCX allows it in the callback.
    unsafe { ucp_request_free(request) };
}

/// Stream receive completion.
///
/// # Safety
///
/// Called by UCX once per receive posted with an [`OpCtx`] holding a [`Keep::Buf`].
pub(crate) unsafe extern "C" fn on_received(
    request: *mut c_void,
    status: ucs_status_t,
    length: usize,
    user_data: *mut c_void,
) {
    // SAFETY: as in `on_sent`: the context leaked for this request, reclaimed once.
    let ctx = unsafe { Box::from_raw(user_data.cast::<OpCtx>()) };
    let OpCtx { queue, op, keep } = *ctx;
    let buf = match keep {
        Keep::Buf(buf) => buf,
        _ => Vec::new(),
    };
    // SAFETY: the queue outlives every request.
    unsafe {
        push_event(
            queue,
            Event::Received {
                op,
                status,
                buf,
                length,
            },
        )
    };
    // SAFETY: complete and ours to release.
    unsafe { ucp_request_free(request) };
}

/// One-sided read completion: hands what the read held back in an [`Event::Got`], so that the
/// landing buffer and the rkey are released by the progress thread, outside UCX.
///
/// # Safety
///
/// Called by UCX once per `ucp_get_nbx` posted with an [`OpCtx`] holding a [`Keep::Get`].
pub(crate) unsafe extern "C" fn on_got(
    request: *mut c_void,
    status: ucs_status_t,
    user_data: *mut c_void,
) {
    // SAFETY: as in `on_sent`: the context leaked for this request, reclaimed once.
    let ctx = unsafe { Box::from_raw(user_data.cast::<OpCtx>()) };
    let OpCtx { queue, op, keep } = *ctx;
    // SAFETY: the queue outlives every request.
    unsafe {
        push_event(
            queue,
            Event::Got {
                op,
                status,
                held: keep,
            },
        )
    };
    // SAFETY: complete and ours to release.
    unsafe { ucp_request_free(request) };
}

/// Endpoint error handler.
///
/// # Safety
///
/// `arg` is the endpoint's [`EpCtx`], alive until the endpoint's close completes.
pub(crate) unsafe extern "C" fn on_failed(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: see above; only read.
    let ctx = unsafe { &*arg.cast::<EpCtx>() };
    // SAFETY: the queue outlives every endpoint.
    unsafe {
        push_event(
            ctx.queue,
            Event::Failed {
                conn: ctx.conn,
                status,
            },
        )
    };
}

/// What an `*_nbx` call returned, turned into "done now" or "callback later". `received` is
/// the length UCX wrote for a receive that completed at once (`None` for sends and closes).
///
/// # Safety
///
/// `ctx` is the context passed as `user_data` to the call that returned `ret`.
pub(crate) unsafe fn settle(ret: ucs_status_ptr_t, ctx: *mut OpCtx, received: Option<usize>) {
    if !ret.is_null() && !ucs_ptr_is_err(ret) {
        return; // In progress: the callback owns `ctx` now.
    }
    // Completed or failed at once: UCX will not call back, so report it here.
    let status = ucs_ptr_status(ret);
    // SAFETY: UCX did not take ownership (no request), so the box is still ours.
    let ctx = unsafe { Box::from_raw(ctx) };
    let OpCtx { queue, op, keep } = *ctx;
    let event = match (received, keep) {
        (_, held @ Keep::Get(..)) => Event::Got { op, status, held },
        (Some(length), Keep::Buf(buf)) => Event::Received {
            op,
            status,
            buf,
            length: if status == ucs_status_t::UCS_OK {
                length
            } else {
                0
            },
        },
        _ => Event::Sent { op, status },
    };
    // SAFETY: the queue outlives every operation.
    unsafe { push_event(queue, event) };
}
