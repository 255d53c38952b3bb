//! [`Endpoint`]: one UCP endpoint (client or server side) and the stream operations posted on
//! it. What each operation keeps alive, and the callbacks, are in `ops` (the soundness
//! argument is there).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ptr;

use socket2::SockAddr;
use ucx_sys::{
    ucp_ep_close_flags_t_UCP_EP_CLOSE_FLAG_FORCE, ucp_ep_close_nbx, ucp_ep_create, ucp_ep_h,
    ucp_ep_params_field_UCP_EP_PARAM_FIELD_CONN_REQUEST,
    ucp_ep_params_field_UCP_EP_PARAM_FIELD_ERR_HANDLER,
    ucp_ep_params_field_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
    ucp_ep_params_field_UCP_EP_PARAM_FIELD_FLAGS,
    ucp_ep_params_field_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
    ucp_ep_params_field_UCP_EP_PARAM_FIELD_SOCK_ADDR,
    ucp_ep_params_flags_field_UCP_EP_PARAMS_FLAGS_CLIENT_SERVER, ucp_ep_params_t,
    ucp_err_handler_t, ucp_err_handling_mode_t_UCP_ERR_HANDLING_MODE_NONE,
    ucp_err_handling_mode_t_UCP_ERR_HANDLING_MODE_PEER, ucp_op_attr_t_UCP_OP_ATTR_FIELD_CALLBACK,
    ucp_op_attr_t_UCP_OP_ATTR_FIELD_FLAGS, ucp_op_attr_t_UCP_OP_ATTR_FIELD_USER_DATA,
    ucp_request_param_t, ucp_stream_recv_flags_t_UCP_STREAM_RECV_FLAG_WAITALL, ucp_stream_recv_nbx,
    ucp_stream_send_nbx, ucs_sock_addr_t,
};

use crate::error::TransportError;
use crate::ucx::context::check;
use crate::ucx::ops::{on_failed, on_received, on_sent, settle, EpCtx, Keep, OpCtx};
use crate::ucx::worker::{ConnId, ConnRequest, EventQueue, OpId, OpKind, Worker};

/// One UCP endpoint. Dropping it force-closes it (see `Endpoint::close`).
///
/// Sends are held back until the first one completes: measured with UCX 1.13 over TCP, stream
/// sends posted while a client-server endpoint is still wiring up can reach the peer out of
/// order (the first queued during wire-up, a later one sent directly once a lane is up), and
/// this protocol is nothing but order. Once one send has completed the endpoint is connected
/// and sends go straight to UCX, in order.
pub(crate) struct Endpoint {
    handle: ucp_ep_h,
    conn: ConnId,
    queue: *const EventQueue,
    /// Taken by the close, which keeps it alive until UCX is done with the endpoint.
    ctx: Option<Box<EpCtx>>,
    /// A send has completed: the endpoint is wired up.
    ready: bool,
    /// The first send was handed to UCX.
    first_posted: bool,
    /// Sends waiting for the first to complete (never seen by UCX if the endpoint closes).
    held: VecDeque<(OpKind, Keep)>,
}

impl Endpoint {
    fn create(
        worker: &Worker,
        conn: ConnId,
        mut params: ucp_ep_params_t,
        peer_errors: bool,
    ) -> Result<Endpoint, TransportError> {
        let ctx = Box::new(EpCtx {
            queue: worker.queue(),
            conn,
        });
        params.field_mask |= ucp_ep_params_field_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE as u64;
        if peer_errors {
            params.field_mask |= ucp_ep_params_field_UCP_EP_PARAM_FIELD_ERR_HANDLER as u64;
            params.err_mode = ucp_err_handling_mode_t_UCP_ERR_HANDLING_MODE_PEER;
            params.err_handler = ucp_err_handler_t {
                cb: Some(on_failed),
                arg: (&*ctx as *const EpCtx).cast_mut().cast(),
            };
        } else {
            // No handler either: seen with UCX 1.13, a read endpoint (no peer error handling)
            // whose peer died had its handler called after its close had completed, with the
            // context already freed. Its failures show on the stream endpoint instead.
            params.err_mode = ucp_err_handling_mode_t_UCP_ERR_HANDLING_MODE_NONE;
        }
        let mut handle: ucp_ep_h = ptr::null_mut();
        // SAFETY: the worker is live and ours; params (and the sockaddr or connection request
        // they point at) are valid for the call; the error context is boxed and kept until
        // the endpoint's close completes.
        check("ucp_ep_create", unsafe {
            ucp_ep_create(worker.handle(), &params, &mut handle)
        })?;
        worker.endpoint_opened();
        Ok(Endpoint {
            handle,
            conn,
            queue: worker.queue(),
            ctx: Some(ctx),
            ready: false,
            first_posted: false,
            held: VecDeque::new(),
        })
    }

    /// Connects to a listener at `addr` (client-server mode, peer error handling). Returns at
    /// once; failures arrive as [`Event::Failed`], and operations posted meanwhile are queued.
    pub(crate) fn connect(
        worker: &Worker,
        conn: ConnId,
        addr: SocketAddr,
    ) -> Result<Endpoint, TransportError> {
        let sa = SockAddr::from(addr);
        let params = ucp_ep_params_t {
            field_mask: (ucp_ep_params_field_UCP_EP_PARAM_FIELD_FLAGS
                | ucp_ep_params_field_UCP_EP_PARAM_FIELD_SOCK_ADDR) as u64,
            flags: ucp_ep_params_flags_field_UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
            sockaddr: ucs_sock_addr_t {
                addr: sa.as_ptr().cast(),
                addrlen: sa.len(),
            },
            ..Default::default()
        };
        // `sa` lives to the end of this function, past the call; UCX copies the address.
        Endpoint::create(worker, conn, params, true)
    }

    /// Connects straight to the worker whose address is `address` (from a lease descriptor),
    /// for one-sided reads only, under the same `conn` as the stream endpoint it serves.
    ///
    /// Without peer error handling: UCX 1.13 offers CMA (and the other shared-memory
    /// transports) only to endpoints that do not ask for it, and a client-server endpoint
    /// never uses them. A dead peer is noticed on the stream endpoint (which has it), whose
    /// end force-closes this one and so cancels its reads.
    pub(crate) fn to_worker(
        worker: &Worker,
        conn: ConnId,
        address: &[u8],
    ) -> Result<Endpoint, TransportError> {
        let params = ucp_ep_params_t {
            field_mask: ucp_ep_params_field_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS as u64,
            address: address.as_ptr().cast(),
            ..Default::default()
        };
        // `address` outlives the call; UCX copies what it needs.
        Endpoint::create(worker, conn, params, false)
    }

    /// Accepts a connection request from the listener.
    pub(crate) fn accept(
        worker: &Worker,
        conn: ConnId,
        request: ConnRequest,
    ) -> Result<Endpoint, TransportError> {
        let params = ucp_ep_params_t {
            field_mask: ucp_ep_params_field_UCP_EP_PARAM_FIELD_CONN_REQUEST as u64,
            conn_request: request.0,
            ..Default::default()
        };
        Endpoint::create(worker, conn, params, true)
    }

    /// Sends what `keep` holds, in order; completion arrives as [`Event::Sent`] for `kind`.
    /// Held (in order) until the endpoint's first send completed.
    pub(crate) fn send(&mut self, kind: OpKind, keep: Keep) {
        if self.ready || !self.first_posted {
            self.first_posted = true;
            return self.post_send(kind, keep);
        }
        self.held.push_back((kind, keep));
    }

    /// A send on this endpoint completed successfully: it is wired up; release held sends.
    pub(crate) fn send_completed(&mut self) {
        if self.ready {
            return;
        }
        self.ready = true;
        while let Some((kind, keep)) = self.held.pop_front() {
            self.post_send(kind, keep);
        }
    }

    fn post_send(&self, kind: OpKind, keep: Keep) {
        let (data, len): (*const u8, usize) = match &keep {
            Keep::Header(h) => (h.as_ptr(), h.len()),
            Keep::Bytes(b) => (b.as_ptr(), b.len()),
            Keep::Buf(b) => (b.as_ptr(), b.len()),
            Keep::Endpoint(_) | Keep::Get(..) => (ptr::null(), 0),
        };
        let op = OpId {
            conn: self.conn,
            kind,
        };
        // The data pointer stays valid when `keep` moves into the box: it points into heap
        // memory (a Box, a Bytes or a Vec), not into `keep` itself.
        let ctx = Box::into_raw(Box::new(OpCtx {
            queue: self.queue,
            op,
            keep,
        }));
        let mut param = ucp_request_param_t {
            op_attr_mask: ucp_op_attr_t_UCP_OP_ATTR_FIELD_CALLBACK
                | ucp_op_attr_t_UCP_OP_ATTR_FIELD_USER_DATA,
            user_data: ctx.cast(),
            ..Default::default()
        };
        param.cb.send = Some(on_sent);
        // SAFETY: the endpoint is open (closing consumes it); `data..data+len` is owned by
        // `ctx`, which lives until the callback (or `settle`) frees it.
        let ret = unsafe { ucp_stream_send_nbx(self.handle, data.cast(), len, &param) };
        // SAFETY: `ctx` is the user_data of this call.
        unsafe { settle(ret, ctx, None) };
    }

    /// Receives into `buf[..len]`: exactly `len` bytes with `waitall`, else at least one.
    /// Completion arrives as [`Event::Received`] for `kind`, with `buf` handed back.
    pub(crate) fn recv(&self, kind: OpKind, mut buf: Vec<u8>, len: usize, waitall: bool) {
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let op = OpId {
            conn: self.conn,
            kind,
        };
        let ctx = Box::into_raw(Box::new(OpCtx {
            queue: self.queue,
            op,
            keep: Keep::Buf(buf),
        }));
        // SAFETY: `ctx` was just leaked and is only ours until the call below.
        let data = match unsafe { &mut (*ctx).keep } {
            Keep::Buf(b) => b.as_mut_ptr(),
            _ => ptr::null_mut(),
        };
        let mut param = ucp_request_param_t {
            op_attr_mask: ucp_op_attr_t_UCP_OP_ATTR_FIELD_CALLBACK
                | ucp_op_attr_t_UCP_OP_ATTR_FIELD_USER_DATA
                | ucp_op_attr_t_UCP_OP_ATTR_FIELD_FLAGS,
            flags: if waitall {
                ucp_stream_recv_flags_t_UCP_STREAM_RECV_FLAG_WAITALL
            } else {
                0
            },
            user_data: ctx.cast(),
            ..Default::default()
        };
        param.cb.recv_stream = Some(on_received);
        let mut length: usize = 0;
        // SAFETY: the endpoint is open; `data..data+len` lies in the Vec owned by `ctx`, which
        // lives until the callback (or `settle`) frees it; `length` is written only on
        // immediate completion, before the call returns.
        let ret =
            unsafe { ucp_stream_recv_nbx(self.handle, data.cast(), len, &mut length, &param) };
        // SAFETY: `ctx` is the user_data of this call.
        unsafe { settle(ret, ctx, Some(length)) };
    }

    /// The raw handle, for unpacking rkeys and posting one-sided reads (`rma`).
    pub(crate) fn handle(&self) -> ucp_ep_h {
        self.handle
    }

    /// The endpoint's id and event queue, for operations posted elsewhere (`rma`).
    pub(crate) fn op(&self, kind: OpKind) -> (OpId, *const EventQueue) {
        (
            OpId {
                conn: self.conn,
                kind,
            },
            self.queue,
        )
    }

    /// Force-closes the endpoint (on drop): UCX cancels its posted operations (their callbacks
    /// run, giving their buffers back) and stops touching our memory. The error context is
    /// kept alive by the close operation until the close completes.
    fn close(&mut self) {
        let Some(ctx) = self.ctx.take() else { return };
        let queue = self.queue;
        let op = OpId {
            conn: self.conn,
            kind: OpKind::Close,
        };
        let op_ctx = Box::into_raw(Box::new(OpCtx {
            queue,
            op,
            keep: Keep::Endpoint(ctx),
        }));
        let mut param = ucp_request_param_t {
            op_attr_mask: ucp_op_attr_t_UCP_OP_ATTR_FIELD_CALLBACK
                | ucp_op_attr_t_UCP_OP_ATTR_FIELD_USER_DATA
                | ucp_op_attr_t_UCP_OP_ATTR_FIELD_FLAGS,
            flags: ucp_ep_close_flags_t_UCP_EP_CLOSE_FLAG_FORCE,
            user_data: op_ctx.cast(),
            ..Default::default()
        };
        param.cb.send = Some(on_sent);
        // SAFETY: the endpoint was created by us and is closed once (ctx taken above).
        let ret = unsafe { ucp_ep_close_nbx(self.handle, &param) };
        // Either the close callback frees `op_ctx` (and with it the error context) and reports
        // `OpKind::Close`, or the close finished at once and `settle` does both now.
        // SAFETY: `op_ctx` is the user_data of this call.
        unsafe { settle(ret, op_ctx, None) };
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.close();
    }
}
