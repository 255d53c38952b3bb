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
//! One-sided read mode (`FetchRma`): the found block is mapped and answered with a `Lease`
//! header and its descriptor instead of the bytes (`mapped`); the lease is held until the
//! client's `Release` (handled as it is read, no answer), `fetch_timeout_ms`, or the
//! endpoint's end; at `ucx.leases_per_connection_max` leases a `FetchRma` is answered
//! `Unavailable` (counted).
//!
//! An endpoint is closed (and its lookups abandoned) when its peer breaks the protocol
//! (counted), when part of a request has waited `request_timeout_ms` for the rest or a
//! response has been sending for `fetch_timeout_ms` (counted as timeouts), or when UCX reports
//! it failed (the peer left). Other endpoints are untouched.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
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
use crate::lease::WORKER_ADDRESS_BYTES_MAX;
use crate::source::{Accepted, BlockSource, Holding, SourceLookup};
use crate::ucx::endpoint::Endpoint;
use crate::ucx::listener::Listener;
use crate::ucx::mailbox::{Answer, Command, Mailbox};
use crate::ucx::mapped::{Leases, MappedBlock, Staging};
use crate::ucx::ops::Keep;
use crate::ucx::proto::{InOrder, Incoming, RequestReader};
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
    /// Blocks mapped for this client's one-sided reads.
    leases: Leases,
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
    /// The worker's address, sent in every lease (bounded at bind).
    worker_address: Vec<u8>,
    /// Regions leased blocks are copied into (`ucx.stage_leases`), else none.
    staging: Option<Rc<RefCell<Staging>>>,
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
        let worker_address = worker.address()?;
        if !(1..=WORKER_ADDRESS_BYTES_MAX).contains(&worker_address.len()) {
            return Err(TransportError::Fabric {
                fabric: "UCX",
                call: "ucp_worker_get_address",
                reason: format!(
                    "expected an address of 1..={WORKER_ADDRESS_BYTES_MAX} bytes, found {}",
                    worker_address.len()
                ),
            });
        }
        let staging = config
            .ucx
            .stage_leases
            .then(|| Staging::new(config.ucx.leases_per_connection_max));
        Ok(Servers {
            worker_address,
            staging,
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
            reader: RequestReader::new(self.config.max_frame_bytes),
            order: InOrder::default(),
            sending: VecDeque::new(),
            lookups: HashMap::new(),
            recv_buf: Some(Vec::new()),
            leases: Leases::default(),
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
        for incoming in requests {
            let request = *incoming.header();
            if request.kind == FrameKind::Release {
                // The client read the block: its bytes count as sent now.
                match conn.leases.release(request.id) {
                    Some(len) => self.counters.add_bytes_out(len),
                    None => {
                        tracing::debug!(conn = id, block = %request.id, "release of no lease held")
                    }
                }
                continue;
            }
            let seq = conn.order.push();
            let (source, mailbox) = (self.source.clone(), self.mailbox.clone());
            let timeout = self.config.fetch_timeout();
            let pushed = match incoming {
                Incoming::Pushed(_, Ok(block)) => Some(Some(block)),
                Incoming::Pushed(_, Err(e)) => {
                    self.counters.verify_failures();
                    self.counters.pushes_rejected();
                    tracing::warn!(conn = id, error = %e, "a pushed block failed verification");
                    Some(None)
                }
                Incoming::Request(_) => None,
            };
            let task = self.runtime.spawn(async move {
                let answer = async {
                    match (request.kind, pushed) {
                        (_, Some(Some(block))) => {
                            Answer::Accepted(Some(source.accept(block).await))
                        }
                        (_, Some(None)) => Answer::Accepted(None),
                        (FrameKind::Probe, None) => {
                            Answer::Holding(source.holds(request.namespace, request.id).await)
                        }
                        _ => Answer::Lookup(source.lookup(request.namespace, request.id).await),
                    }
                };
                let answer = tokio::time::timeout(timeout, answer).await.ok();
                let _ = mailbox.send(Command::LookupDone {
                    conn: id,
                    seq,
                    request,
                    answer,
                });
            });
            conn.lookups.insert(seq, task.abort_handle());
        }
        post_recv(conn, self.config.serve_streams_max as usize);
    }

    /// A lookup finished: queue its response and send whatever is next in order (a leased
    /// block is mapped through `worker`'s context).
    pub(crate) fn lookup_done(
        &mut self,
        worker: &Worker,
        id: ConnId,
        seq: u64,
        request: FrameHeader,
        answer: Option<Answer>,
    ) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return; // The endpoint closed meanwhile.
        };
        conn.lookups.remove(&seq);
        let (kind, body) = match answer {
            Some(Answer::Holding(Holding::Held(len))) => {
                self.counters.probes_served();
                (FrameKind::Held, Bytes::copy_from_slice(&len.to_le_bytes()))
            }
            Some(Answer::Holding(Holding::NotFound)) => {
                self.counters.probes_served();
                (FrameKind::NotFound, Bytes::new())
            }
            Some(Answer::Holding(Holding::Unavailable)) => {
                self.counters.probes_served();
                (FrameKind::Unavailable, Bytes::new())
            }
            Some(Answer::Accepted(Some(Accepted::Stored))) => {
                self.counters.pushes_stored();
                (FrameKind::Stored, Bytes::new())
            }
            Some(Answer::Accepted(Some(Accepted::Unavailable))) => {
                (FrameKind::Unavailable, Bytes::new())
            }
            Some(Answer::Accepted(None)) => (FrameKind::Rejected, Bytes::new()),
            Some(Answer::Lookup(SourceLookup::Found(bytes)))
                if bytes.len() as u64 <= self.config.max_frame_bytes =>
            {
                if request.kind == FrameKind::FetchRma {
                    let at = (
                        worker,
                        self.worker_address.as_slice(),
                        self.staging.as_ref(),
                    );
                    lease(at, conn, &self.config, &self.counters, request, bytes)
                } else {
                    (FrameKind::Block, bytes)
                }
            }
            Some(Answer::Lookup(SourceLookup::Found(bytes))) => {
                tracing::warn!(
                    id = %request.id,
                    len = bytes.len(),
                    max = self.config.max_frame_bytes,
                    "block exceeds max_frame_bytes; answering unavailable"
                );
                (FrameKind::Unavailable, Bytes::new())
            }
            Some(Answer::Lookup(SourceLookup::NotFound)) => (FrameKind::NotFound, Bytes::new()),
            Some(Answer::Lookup(SourceLookup::Unavailable)) => {
                (FrameKind::Unavailable, Bytes::new())
            }
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
                FrameKind::Block | FrameKind::Lease => self.counters.blocks_served(),
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

    /// Request and send timeouts; leases past `fetch_timeout_ms` end.
    pub(crate) fn tick(&mut self, now: Instant) {
        let (request, fetch) = (self.config.request_timeout(), self.config.fetch_timeout());
        for (id, c) in self.conns.iter_mut() {
            for _ in 0..c.leases.expire(now, fetch) {
                self.counters.leases_expired();
                tracing::warn!(conn = id, "a lease ran past fetch_timeout_ms; unmapped");
            }
        }
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
                    c.leases.next_expiry(fetch),
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

/// Maps a found block for `request` (a `FetchRma`) and holds the lease on `conn`: the kind and
/// body (the descriptor) to answer with; `Unavailable` at the lease bound or if UCX refuses.
fn lease(
    (worker, worker_address, staging): (&Worker, &[u8], Option<&Rc<RefCell<Staging>>>),
    conn: &mut Conn,
    config: &TransportConfig,
    counters: &Arc<TransportCounters>,
    request: FrameHeader,
    bytes: Bytes,
) -> (FrameKind, Bytes) {
    if conn.leases.len() >= config.ucx.leases_per_connection_max {
        counters.leases_refused();
        tracing::warn!(
            id = %request.id,
            max = config.ucx.leases_per_connection_max,
            "connection holds leases_per_connection_max leases; answering unavailable"
        );
        return (FrameKind::Unavailable, Bytes::new());
    }
    let mapped = MappedBlock::map(
        worker,
        worker_address,
        request.id,
        bytes,
        staging,
        counters.clone(),
    );
    match mapped {
        Ok((block, descriptor)) => {
            conn.leases.hold(block);
            (FrameKind::Lease, Bytes::from(descriptor.encode()))
        }
        Err(error) => {
            tracing::warn!(id = %request.id, %error, "mapping a block failed; answering unavailable");
            (FrameKind::Unavailable, Bytes::new())
        }
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
