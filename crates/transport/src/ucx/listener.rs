//! [`Listener`]: a UCP listener on a socket address; connection requests arrive as
//! [`Event::ConnRequest`] and are accepted (or rejected) by the progress thread.

use std::ffi::c_void;
use std::net::SocketAddr;
use std::ptr;

use socket2::SockAddr;
use ucx_sys::{
    ucp_conn_request_h, ucp_listener_attr_field_UCP_LISTENER_ATTR_FIELD_SOCKADDR,
    ucp_listener_attr_t, ucp_listener_conn_handler_t, ucp_listener_create, ucp_listener_destroy,
    ucp_listener_h, ucp_listener_params_field_UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
    ucp_listener_params_field_UCP_LISTENER_PARAM_FIELD_SOCK_ADDR, ucp_listener_params_t,
    ucp_listener_query, ucp_listener_reject, ucs_sock_addr_t,
};

use crate::error::TransportError;
use crate::ucx::context::check;
use crate::ucx::worker::{push_event, ConnRequest, Event, EventQueue, Worker};

/// Connection-request handler.
///
/// # Safety
///
/// `arg` is the worker's [`EventQueue`], which outlives the listener.
unsafe extern "C" fn on_conn_request(request: ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: see above.
    unsafe {
        push_event(
            arg.cast_const().cast::<EventQueue>(),
            Event::ConnRequest(ConnRequest(request)),
        )
    };
}

/// A listening socket address. Must be dropped before its worker.
pub(crate) struct Listener {
    handle: ucp_listener_h,
    addr: SocketAddr,
}

impl Listener {
    /// Listens on `addr` (port 0: any free port; [`Listener::local_addr`] says which).
    pub(crate) fn bind(worker: &Worker, addr: SocketAddr) -> Result<Listener, TransportError> {
        let sa = SockAddr::from(addr);
        let params = ucp_listener_params_t {
            field_mask: (ucp_listener_params_field_UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
                | ucp_listener_params_field_UCP_LISTENER_PARAM_FIELD_CONN_HANDLER)
                as u64,
            sockaddr: ucs_sock_addr_t {
                addr: sa.as_ptr().cast(),
                addrlen: sa.len(),
            },
            conn_handler: ucp_listener_conn_handler_t {
                cb: Some(on_conn_request),
                arg: worker.queue().cast_mut().cast(),
            },
            ..Default::default()
        };
        let mut handle: ucp_listener_h = ptr::null_mut();
        // SAFETY: live worker on its own thread; params and the address they point at are
        // valid for the call (UCX copies the address); the queue outlives the listener.
        check("ucp_listener_create", unsafe {
            ucp_listener_create(worker.handle(), &params, &mut handle)
        })
        .map_err(|e| match e {
            TransportError::Fabric { reason, .. } => TransportError::Io {
                context: format!("UCX listening on {addr}"),
                source: std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, reason),
            },
            other => other,
        })?;
        let mut attr = ucp_listener_attr_t {
            field_mask: ucp_listener_attr_field_UCP_LISTENER_ATTR_FIELD_SOCKADDR as u64,
            ..Default::default()
        };
        let mut listener = Listener { handle, addr };
        // SAFETY: live listener; `attr` is writable.
        check("ucp_listener_query", unsafe {
            ucp_listener_query(listener.handle, &mut attr)
        })?;
        let bound = socket_addr(&attr.sockaddr).ok_or_else(|| TransportError::Fabric {
            fabric: "UCX",
            call: "ucp_listener_query",
            reason: "the listener reported an address that is not IPv4 or IPv6".into(),
        })?;
        listener.addr = bound;
        Ok(listener)
    }

    /// The address peers connect to.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Refuses a connection request (at `connections_max`, or while stopping).
    pub(crate) fn reject(&self, request: ConnRequest) {
        // SAFETY: the request came from this listener and is answered once.
        let _ = unsafe { ucp_listener_reject(self.handle, request.0) };
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, before the worker.
        unsafe { ucp_listener_destroy(self.handle) };
    }
}

/// The socket address a listener reports (a `sockaddr_storage`) as a [`SocketAddr`].
fn socket_addr(storage: &ucx_sys::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: socket2 hands us zeroed storage of the platform's sockaddr_storage size; we copy
    // at most that many bytes from UCX's sockaddr_storage (the same C type) into it.
    let ((), addr) = unsafe {
        SockAddr::try_init(|out, len| {
            let n = std::mem::size_of::<ucx_sys::sockaddr_storage>().min(*len as usize);
            ptr::copy_nonoverlapping(
                (storage as *const ucx_sys::sockaddr_storage).cast::<u8>(),
                out.cast::<u8>(),
                n,
            );
            *len = n as libc::socklen_t;
            Ok(())
        })
    }
    .ok()?;
    addr.as_socket()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_address_reads_back_the_same() {
        for addr in ["127.0.0.1:7201", "[::1]:65000", "192.0.2.2:1"] {
            let addr: SocketAddr = addr.parse().expect("address");
            let sa = SockAddr::from(addr);
            let mut storage = ucx_sys::sockaddr_storage::default();
            // SAFETY: copies `sa.len()` bytes (at most a sockaddr_storage) into a zeroed one.
            unsafe {
                ptr::copy_nonoverlapping(
                    sa.as_ptr().cast::<u8>(),
                    (&mut storage as *mut ucx_sys::sockaddr_storage).cast::<u8>(),
                    sa.len() as usize,
                )
            };
            assert_eq!(socket_addr(&storage), Some(addr));
        }
        assert_eq!(socket_addr(&ucx_sys::sockaddr_storage::default()), None);
    }
}
