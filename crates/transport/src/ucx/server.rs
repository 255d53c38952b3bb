//! The serving side, on the progress thread: accept endpoints (at most `connections_max`),
//! read pipelined requests, look blocks up on tokio, answer in request order.
//!
//! Per endpoint: one request receive is posted (not WAITALL) sized so that at most the free
//! request slots (`serve_streams_max` minus requests being looked up or answered) can complete
//! — a client that sends more simply waits (back-pressure). Each request's lookup runs as a
//! tokio task bounded by `fetch_timeout_ms` (past it the answer is `Unavailable`, counted as a
//! timeout) and reports back through the mailbox; [`InOrder`] releases responses in request
//! order; a response is its header and, for a block, the source's `Bytes` — sent as they are,
//! kept alive by the send operation until UCX completes it.
//!
//! An endpoint is closed (and its lookups abandoned) when its peer breaks the protocol
//! (counted), when part of a request has waited `request_timeout_ms` for the rest or a
//! response has been sending for `fetch_timeout_ms` (counted as timeouts), or when UCX reports
//! it failed (the peer left). Other endpoints are untouched.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use ucx_sys::{status_string, ucs_status_t};

use crate::config::TransportConfig;
use crate::counters::TransportCounters;
use crate::error::TransportError;
use crate::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::source::{BlockSource, SourceLookup};
use crate::ucx::endpoint::Endpoint;
use crate::ucx::listener::Listener;
use crate::ucx::mailbox::{Command, Mailbox};
use crate::ucx::ops::Keep;
use crate::ucx::proto::{InOrder, RequestReader};
use crate::ucx::worker::{ConnId, ConnIds, ConnRequest, OpId, OpKind, Worker};

/// Most requests read in one receive (bounds the receive buffer, whatever the slots).
const REQUESTS_PER_RECV_MAX: usize = 16;

/// A response ready to go.
struct Response {
    header: FrameHeader,
    body: Bytes,
}

/// A response being sent.
struct Sending {
    seq: u64,
    ops_left: u8,
    started: Instant,
    bytes: u64,
    kind: FrameKind,
}

/// One client's endpoint.
struct Conn {
    ep: Endpoint,
    reader: RequestReader,
    order: InOrder<Response>,
    sending: VecDeque<Sending>,
    lookups: HashMap<u64, AbortHandle>,
    /// The request buffer, when no receive is posted.
    recv_buf: Option<Vec<u8>>,
}

impl Conn {
    fn slots_free(&self, max: usize) -> usize {
        max.saturating_sub(self.order.len() + self.sending.len())
    }
}

/// The listener and every server endpoint of one transport.
pub(crate) struct Servers {
    config: TransportConfig,
    counters: Arc<TransportCounters>,
    source: Arc<dyn BlockSource>,
    runtime: Handle,
    mailbox: Mailbox,
    listener: Option<Listener>,
    conns: HashMap<ConnId, Conn>,
}

impl Servers {
    /// Listens on `listen`; lookups run on `runtime` and report through `mailbox`.
    pub(crate) fn bind(
        worker: &Worker,
        listen: SocketAddr,
        config: TransportConfig,
        counters: Arc<TransportCounters>,
        source: Arc<dyn BlockSource>,
        runtime: Handle,
        mailbox: Mailbox,
    ) -> Result<Servers, TransportError> {
        let listener = Listener::bind(worker, listen)?;
        Ok(Servers {
            config,
            counters,
            source,
            runtime,
            mailbox,
            listener: Some(listener),
            conns: HashMap::new(),
        })
    }

    /// Where peers connect.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().map(Listener::local_addr)
    }

    /// Whether `conn` is one of ours.
    pub(crate) fn owns(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// A client asks to connect: accept it (below `connections_max`, and not stopping).
    pub(crate) fn on_conn_request(
        &mut self,
        worker: &Worker,
        ids: &mut ConnIds,
        request: ConnRequest,
        stopping: bool,
    ) {
        let Some(listener) = &self.listener else {
            return; // Stopped: the listener (and its pending requests) are gone.
        };
        if stopping || self.conns.len() >= self.config.connections_max {
            tracing::warn!(
                connections = self.conns.len(),
                stopping,
                "refusing a UCX connection (connections_max reached or stopping)"
            );
            return listener.reject(request);
        }
        let id = ids.next();
        let ep = match Endpoint::accept(worker, id, request) {
            Ok(ep) => ep,
            Err(e) => return tracing::warn!(error = %e, "accepting a UCX connection failed"),
        };
        self.counters.connections_opened();
        let mut conn = Conn {
            ep,
            reader: RequestReader::default(),
            order: InOrder::default(),
            sending: VecDeque::new(),
            lookups: HashMap::new(),
            recv_buf: Some(Vec::new()),
        };
        post_recv(&mut conn, self.config.serve_streams_max as usize);
        self.conns.insert(id, conn);
    }

    /// Request bytes arrived (or the endpoint's receive failed: the peer left).
    pub(crate) fn on_received(
        &mut self,
        id: ConnId,
        status: ucs_status_t,
        buf: Vec<u8>,
        length: usize,
    ) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if status != ucs_status_t::UCS_OK {
            tracing::debug!(conn = id, status = %status_string(status), "UCX client went away");
            return self.end(id);
        }
        let mut requests = Vec::new();
        let fed = conn
            .reader
            .feed(&buf[..length], Instant::now(), &mut requests);
        conn.recv_buf = Some(buf);
        if let Err(error) = fed {
            self.counters.protocol_violations();
            tracing::warn!(conn = id, %error, "protocol violation; closing the UCX endpoint");
            return self.end(id);
        }
        for request in requests {
            let seq = conn.order.push();
            let (source, mailbox) = (self.source.clone(), self.mailbox.clone());
            let timeout = self.config.fetch_timeout();
            let task = self.runtime.spawn(async move {
                let lookup = source.lookup(request.namespace, request.id);
                let lookup = tokio::time::timeout(timeout, lookup).await.ok();
                let _ = mailbox.send(Command::LookupDone {
                    conn: id,
                    seq,
                    request,
                    lookup,
                });
            });
            conn.lookups.insert(seq, task.abort_handle());
        }
        post_recv(conn, self.config.serve_streams_max as usize);
    }

    /// A lookup finished: queue its response and send whatever is next in order.
    pub(crate) fn lookup_done(
        &mut self,
        id: ConnId,
        seq: u64,
        request: FrameHeader,
        lookup: Option<SourceLookup>,
    ) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return; // The endpoint closed meanwhile.
        };
        conn.lookups.remove(&seq);
        let (kind, body) = match lookup {
            Some(SourceLookup::Found(bytes))
                if bytes.len() as u64 <= self.config.max_frame_bytes =>
            {
                (FrameKind::Block, bytes)
            }
            Some(SourceLookup::Found(bytes)) => {
                tracing::warn!(
                    id = %request.id,
                    len = bytes.len(),
                    max = self.config.max_frame_bytes,
                    "block exceeds max_frame_bytes; answering unavailable"
                );
                (FrameKind::Unavailable, Bytes::new())
            }
            Some(SourceLookup::NotFound) => (FrameKind::NotFound, Bytes::new()),
            Some(SourceLookup::Unavailable) => (FrameKind::Unavailable, Bytes::new()),
            None => {
                self.counters.timeouts();
                tracing::warn!(
                    id = %request.id,
                    "lookup ran past fetch_timeout_ms; answering unavailable"
                );
                (FrameKind::Unavailable, Bytes::new())
            }
        };
        let header = FrameHeader {
            kind,
            length: body.len() as u64,
            ..request
        };
        conn.order.fill(seq, Response { header, body });
        while let Some((seq, r)) = conn.order.pop_ready() {
            let bytes = (FRAME_HEADER_LEN + r.body.len()) as u64;
            conn.ep.send(
                OpKind::Response(seq),
                Keep::Header(Box::new(r.header.encode())),
            );
            let mut ops_left = 1;
            if !r.body.is_empty() {
                // The block's bytes go out as the source holds them: no copy, no re-encoding.
                conn.ep.send(OpKind::Response(seq), Keep::Bytes(r.body));
                ops_left += 1;
            }
            conn.sending.push_back(Sending {
                seq,
                ops_left,
                started: Instant::now(),
                bytes,
                kind: r.header.kind,
            });
        }
    }

    /// Part of a response was sent.
    pub(crate) fn on_sent(&mut self, op: OpId, status: ucs_status_t) {
        let OpKind::Response(seq) = op.kind else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&op.conn) else {
            return;
        };
        if status != ucs_status_t::UCS_OK {
            return self.end(op.conn);
        }
        conn.ep.send_completed();
        let Some(i) = conn.sending.iter().position(|s| s.seq == seq) else {
            return;
        };
        conn.sending[i].ops_left -= 1;
        if conn.sending[i].ops_left > 0 {
            return;
        }
        if let Some(done) = conn.sending.remove(i) {
            self.counters.add_bytes_out(done.bytes);
            match done.kind {
                FrameKind::Block => self.counters.blocks_served(),
                _ => self.counters.not_found_served(),
            }
        }
        post_recv(conn, self.config.serve_streams_max as usize);
    }

    /// The endpoint failed (the client left or died).
    pub(crate) fn on_failed(&mut self, id: ConnId, status: ucs_status_t) {
        tracing::debug!(conn = id, status = %status_string(status), "UCX server endpoint failed");
        self.end(id);
    }

    fn end(&mut self, id: ConnId) {
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        for task in conn.lookups.values() {
            task.abort();
        }
        self.counters.connections_closed();
        // Dropping the endpoint force-closes it; in-flight sends are cancelled and release the
        // blocks they kept alive through their events.
    }

    /// Request and send timeouts.
    pub(crate) fn tick(&mut self, now: Instant) {
        let (request, fetch) = (self.config.request_timeout(), self.config.fetch_timeout());
        let late: Vec<(ConnId, &'static str)> = self
            .conns
            .iter()
            .filter_map(|(id, c)| {
                if c.reader.partial_since().is_some_and(|t| now >= t + request) {
                    Some((*id, "rest of a request"))
                } else if c.sending.front().is_some_and(|s| now >= s.started + fetch) {
                    Some((*id, "a response to be taken"))
                } else {
                    None
                }
            })
            .collect();
        for (id, what) in late {
            self.counters.timeouts();
            tracing::warn!(
                conn = id,
                "timed out waiting for the {what}; closing the UCX endpoint"
            );
            self.end(id);
        }
    }

    /// The earliest moment [`Servers::tick`] has something to do.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let (request, fetch) = (self.config.request_timeout(), self.config.fetch_timeout());
        self.conns
            .values()
            .flat_map(|c| {
                [
                    c.reader.partial_since().map(|t| t + request),
                    c.sending.front().map(|s| s.started + fetch),
                ]
            })
            .flatten()
            .min()
    }

    /// Closes every endpoint (lookups abandoned). The listener stays until
    /// [`Servers::stop_listening`].
    pub(crate) fn shutdown(&mut self) {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.end(id);
        }
    }

    /// Destroys the listener (before the worker).
    pub(crate) fn stop_listening(&mut self) {
        self.listener = None;
    }
}

/// Posts the next request receive if none is posted and a request slot is free.
fn post_recv(conn: &mut Conn, serve_streams_max: usize) {
    let slots = conn
        .slots_free(serve_streams_max)
        .min(REQUESTS_PER_RECV_MAX);
    if slots == 0 {
        return;
    }
    let Some(buf) = conn.recv_buf.take() else {
        return; // One is posted.
    };
    let room = conn.reader.room(slots);
    conn.ep.recv(OpKind::Requests, buf, room, false);
}
