//! The receiving half of a client connection: response headers, then payload chunks pushed
//! to the oldest fetch's receipt while the next chunks are already posted.

use std::time::Instant;

use ucx_sys::ucs_status_t;

use crate::config::TransportConfig;
use crate::error::TransportError;
use crate::frame::{decode_response, FrameKind, FRAME_HEADER_LEN};
use crate::ucx::client::{mark_connected, Chunks, Clients, Conn, Ending, Phase};
use crate::ucx::endpoint::Endpoint;
use crate::ucx::proto::PayloadPlan;
use crate::ucx::receipt::receive_error;
use crate::ucx::worker::{ConnId, OpId, OpKind, Worker};

impl Clients {
    /// A header or chunk receive completed.
    pub(crate) fn on_received(
        &mut self,
        worker: &Worker,
        op: OpId,
        status: ucs_status_t,
        buf: Vec<u8>,
        length: usize,
    ) {
        let Some(conn) = self.conns.get_mut(&op.conn) else {
            return; // Ended; the buffer UCX gave back is dropped here.
        };
        if status != ucs_status_t::UCS_OK {
            // A failed receive may still have filled part of its buffer: count it, so the
            // error says how far the payload got.
            if let (OpKind::Chunk, Phase::Payload(plan)) = (op.kind, &mut conn.phase) {
                self.counters.add_bytes_in(length as u64);
                plan.received(length);
            }
            return self.end(op.conn, Ending::Failed(status));
        }
        self.counters.add_bytes_in(length as u64);
        mark_connected(conn, &self.counters);
        match op.kind {
            OpKind::Header => self.on_header(op.conn, buf),
            OpKind::Chunk => self.on_chunk(op.conn, buf, length),
            OpKind::Descriptor => self.on_descriptor(worker, op.conn, buf, length),
            _ => {}
        }
    }

    fn on_header(&mut self, id: ConnId, buf: Vec<u8>) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(front) = conn.awaiting.front() else {
            // A header receive is posted only while a fetch awaits; nothing to match it to.
            return self.end(id, Ending::Violation);
        };
        let decoded = decode_response(&buf, &front.request, self.config.max_frame_bytes);
        let id_asked = front.request.id;
        conn.header_buf = Some(buf);
        let response = match decoded {
            Ok(r) => r,
            Err(error) => {
                self.counters.protocol_violations();
                tracing::warn!(
                    peer = %conn.peer,
                    %error,
                    "protocol violation; closing the UCX endpoint"
                );
                let error = TransportError::Protocol {
                    peer: conn.peer.clone(),
                    error: Box::new(error),
                };
                return self.fail_front_and_end(id, error);
            }
        };
        match response.kind {
            // A probe's `Held` carries the stored length; a push's `Stored` nothing: both are
            // payloads of their receipts (the latter of length 0, complete at once).
            FrameKind::Block | FrameKind::Held | FrameKind::Stored => {
                let mut plan = PayloadPlan::new(response.length, self.config.ucx.recv_chunk_bytes);
                if let Some(front) = conn.awaiting.front_mut() {
                    front.receipt.begin(response.length);
                }
                if plan.is_complete() {
                    return self.complete_front(id);
                }
                post_chunks(&conn.ep, &mut conn.chunks, &mut plan, &self.config);
                conn.phase = Phase::Payload(plan);
            }
            FrameKind::Lease => super::read::post_descriptor(conn, response.length),
            FrameKind::NotFound => {
                let peer = conn.peer.clone();
                self.fail_front(id, TransportError::NotFound { peer, id: id_asked });
            }
            FrameKind::Rejected => {
                let peer = conn.peer.clone();
                self.fail_front(id, TransportError::Rejected { peer, id: id_asked });
            }
            // decode_response lets only the answers to the request's kind through.
            FrameKind::Unavailable
            | FrameKind::Fetch
            | FrameKind::FetchRma
            | FrameKind::Release
            | FrameKind::Push
            | FrameKind::Probe => {
                let peer = conn.peer.clone();
                self.fail_front(id, TransportError::Unavailable { peer, id: id_asked });
            }
        }
    }

    fn on_chunk(&mut self, id: ConnId, buf: Vec<u8>, length: usize) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let (Phase::Payload(plan), Some(front)) = (&mut conn.phase, conn.awaiting.front_mut())
        else {
            return self.end(id, Ending::Violation);
        };
        plan.received(length);
        let pushed = front.receipt.push(&buf[..length]);
        conn.chunks.spare.push(buf);
        if let Err(e) = pushed {
            let error = receive_error(&conn.peer, front.request.id, e);
            return self.fail_front_and_end(id, error);
        }
        if plan.is_complete() {
            return self.complete_front(id);
        }
        post_chunks(&conn.ep, &mut conn.chunks, plan, &self.config);
    }

    /// The oldest fetch's payload is complete: verify and deliver, then read the next header.
    pub(super) fn complete_front(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(fetch) = conn.awaiting.pop_front() {
            self.tokens.remove(&fetch.token);
            fetch
                .receipt
                .finish(&conn.peer, fetch.request.id, &self.counters);
        }
        next_response(conn);
    }

    /// The oldest fetch got a typed answer (not found, unavailable); the connection goes on.
    fn fail_front(&mut self, id: ConnId, error: TransportError) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(fetch) = conn.awaiting.pop_front() {
            self.tokens.remove(&fetch.token);
            fetch.receipt.fail(error);
        }
        next_response(conn);
    }

    /// The peer broke the protocol: the oldest fetch gets `error`, the others a lost
    /// connection. Counters are updated (by `end`) before anyone is told.
    pub(super) fn fail_front_and_end(&mut self, id: ConnId, error: TransportError) {
        let front = self.conns.get_mut(&id).and_then(|c| c.awaiting.pop_front());
        self.end(id, Ending::Violation);
        if let Some(fetch) = front {
            self.tokens.remove(&fetch.token);
            fetch.receipt.fail(error);
        }
    }
}

/// Posts the receive of the oldest awaiting fetch's response header.
pub(super) fn post_header(conn: &mut Conn) {
    let buf = conn
        .header_buf
        .take()
        .unwrap_or_else(|| vec![0; FRAME_HEADER_LEN]);
    conn.ep.recv(OpKind::Header, buf, FRAME_HEADER_LEN, true);
    conn.phase = Phase::Header;
}

/// After a response: the next header if a fetch awaits, else idle.
pub(super) fn next_response(conn: &mut Conn) {
    conn.last_used = Instant::now();
    if conn.awaiting.is_empty() {
        conn.phase = Phase::Idle;
    } else {
        post_header(conn);
    }
}

/// Keeps up to `recv_chunks_posted` payload receives posted.
pub(super) fn post_chunks(
    ep: &Endpoint,
    chunks: &mut Chunks,
    plan: &mut PayloadPlan,
    config: &TransportConfig,
) {
    loop {
        let buf = match chunks.spare.pop() {
            Some(b) => b,
            None if chunks.allocated < config.ucx.recv_chunks_posted => {
                chunks.allocated += 1;
                vec![0; config.ucx.recv_chunk_bytes]
            }
            None => return,
        };
        let Some(n) = plan.next_post() else {
            chunks.spare.push(buf);
            return;
        };
        ep.recv(OpKind::Chunk, buf, n, true);
    }
}
