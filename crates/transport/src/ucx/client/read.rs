//! The get-mode half of a client connection: after a `Lease` header, its descriptor; then the
//! one-sided read of the block into the receipt's lent buffer, each chunk handed to the
//! receipt (hashed in place) in order as it lands while the next gets are posted; then the
//! `Release` and the verdict.

use ucx_sys::ucs_status_t;

use crate::error::TransportError;
use crate::frame::{FrameError, FrameHeader, FrameKind};
use crate::lease::{LeaseDescriptor, LeaseError};
use crate::ucx::client::{Clients, Conn, Ending, Phase};
use crate::ucx::endpoint::Endpoint;
use crate::ucx::ops::Keep;
use crate::ucx::receipt::receive_error;
use crate::ucx::rma::{fill_mapped, RmaRead};
use crate::ucx::worker::{ConnId, OpId, OpKind, Worker};

/// Posts the receive of a lease descriptor of `length` bytes (bounded by the frame decoder).
pub(super) fn post_descriptor(conn: &mut Conn, length: u64) {
    let length = length as usize;
    conn.ep
        .recv(OpKind::Descriptor, vec![0; length], length, true);
    conn.phase = Phase::Descriptor;
}

/// Makes the connection's read endpoint from `address` on its first lease. A server has one
/// worker, so later leases name the same address; the endpoint made first is kept.
fn read_endpoint(
    worker: &Worker,
    id: ConnId,
    conn: &mut Conn,
    address: &[u8],
) -> Result<(), TransportError> {
    if conn.read_ep.is_none() {
        conn.read_ep = Some(Endpoint::to_worker(worker, id, address)?);
    }
    Ok(())
}

impl Clients {
    /// The oldest fetch's lease descriptor arrived: start reading the block.
    pub(super) fn on_descriptor(
        &mut self,
        worker: &Worker,
        id: ConnId,
        buf: Vec<u8>,
        length: usize,
    ) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let (Phase::Descriptor, Some(front)) = (&conn.phase, conn.awaiting.front_mut()) else {
            return self.end(id, Ending::Violation);
        };
        let lease = match LeaseDescriptor::decode(&buf[..length], self.config.max_frame_bytes) {
            Ok(lease) => lease,
            Err(e) => {
                self.counters.protocol_violations();
                tracing::warn!(peer = %conn.peer, error = %e, "bad lease; closing the UCX endpoint");
                // A block above max_frame_bytes is refused as a stream's would be.
                let error = match e {
                    LeaseError::BadBlockLength { max, found } if found > max => {
                        FrameError::TooLarge { max, found }
                    }
                    e => FrameError::BadLease(e),
                };
                let error = TransportError::Protocol {
                    peer: conn.peer.clone(),
                    error: Box::new(error),
                };
                return self.fail_front_and_end(id, error);
            }
        };
        front.receipt.begin(lease.block_len);
        let asked = front.request.id;
        let chunk = self.config.ucx.recv_chunk_bytes;
        let rkey =
            read_endpoint(worker, id, conn, &lease.worker_address).and_then(|()| {
                match &conn.read_ep {
                    Some(ep) => conn.rkeys.get(ep, &lease.rkey),
                    None => Err(TransportError::Closed),
                }
            });
        let Some(front) = conn.awaiting.front_mut() else {
            return self.end(id, Ending::Violation);
        };
        if let Ok(rkey) = &rkey {
            if fill_mapped(rkey, &lease, &mut *front.receipt) {
                // Read whole, out of the mapping (the verdict waits in the receipt).
                self.counters.add_bytes_in(lease.block_len);
                conn.phase = Phase::Idle;
                return self.release_and_complete(id);
            }
        }
        let dest = front.receipt.lend();
        let started = rkey.and_then(|rkey| RmaRead::start(rkey, &lease, dest, chunk));
        match started {
            Ok(mut read) if read.is_direct() => {
                let Some(front) = conn.awaiting.front_mut() else {
                    return self.end(id, Ending::Violation);
                };
                let copy_thread = self.config.ucx.copy_thread;
                let copied = read.copy_direct(copy_thread, |bytes| front.receipt.landed(bytes));
                self.counters.add_bytes_in(read.landed_bytes());
                conn.phase = Phase::Reading(read);
                if let Err(e) = copied {
                    let error = receive_error(&conn.peer, asked, e);
                    return self.fail_front_and_end(id, error);
                }
                self.read_done(id);
            }
            Ok(mut read) => {
                if let Some(ep) = &conn.read_ep {
                    read.post(ep, self.config.ucx.recv_chunks_posted);
                }
                conn.phase = Phase::Reading(read);
            }
            Err(error) => {
                tracing::warn!(peer = %conn.peer, %error, "cannot read the leased block");
                self.fail_front_and_end(id, error);
            }
        }
    }

    /// A one-sided read completed (what it held is already released).
    pub(crate) fn on_got(&mut self, op: OpId, status: ucs_status_t) {
        let OpKind::Get(n) = op.kind else { return };
        let Some(conn) = self.conns.get_mut(&op.conn) else {
            return; // Ended: the read was cancelled.
        };
        if status != ucs_status_t::UCS_OK {
            return self.end(op.conn, Ending::Failed(status));
        }
        let (Phase::Reading(read), Some(front)) = (&mut conn.phase, conn.awaiting.front_mut())
        else {
            return self.end(op.conn, Ending::Violation);
        };
        let before = read.landed_bytes();
        let handed = read.completed(n, |bytes| front.receipt.landed(bytes));
        self.counters.add_bytes_in(read.landed_bytes() - before);
        if let Err(e) = handed {
            let error = receive_error(&conn.peer, front.request.id, e);
            return self.fail_front_and_end(op.conn, error);
        }
        if !read.is_complete() {
            if let Some(ep) = &conn.read_ep {
                read.post(ep, self.config.ucx.recv_chunks_posted);
            }
            return;
        }
        self.read_done(op.conn);
    }

    /// The oldest fetch's block was read whole: release the lease, hand the buffer back to
    /// the receipt, verify and deliver.
    fn read_done(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if !matches!(conn.phase, Phase::Reading(_)) {
            return self.end(id, Ending::Violation);
        }
        if let Phase::Reading(read) = std::mem::replace(&mut conn.phase, Phase::Idle) {
            // Complete and no get holds the buffer: it goes back whole. Were it not, the
            // receipt would keep nothing and report the block truncated.
            if let (Some(buf), Some(front)) = (read.into_buffer(), conn.awaiting.front_mut()) {
                front.receipt.restore(buf);
            }
        }
        self.release_and_complete(id);
    }

    /// The oldest fetch's block is all here (its verdict waits in the receipt): release the
    /// lease, then verify and deliver.
    fn release_and_complete(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(front) = conn.awaiting.front() else {
            return self.end(id, Ending::Violation);
        };
        let release = FrameHeader::request(
            FrameKind::Release,
            front.request.namespace,
            front.request.id,
        );
        conn.ep
            .send(OpKind::Request, Keep::Header(Box::new(release.encode())));
        self.complete_front(id);
    }
}
