//! The fetching side, on the progress thread: one endpoint per peer, requests pipelined on
//! it, responses read in request order straight into each fetch's [`Receipt`].
//!
//! Per connection: requests are sent as they come (the async side bounds them by
//! `fetches_in_flight_max`); one response header receive (WAITALL,
//! [`crate::frame::FRAME_HEADER_LEN`] bytes) is posted whenever a fetch awaits its response;
//! after a `Block` header, payload receives of `ucx.recv_chunk_bytes` are kept posted
//! `ucx.recv_chunks_posted` deep, and each completed chunk is pushed to the receipt (copied
//! and hashed) while the next one is already posted (`receive`).
//!
//! In get mode (`ucx.mode = "get"`) a request is a `FetchRma`; its answer is a `Lease`
//! header and descriptor, and the block is then read with one-sided gets straight into the
//! receipt's lent destination buffer, chunk by chunk, each landed chunk hashed in order while
//! later gets are posted; then a `Release` is sent and the receipt verified (`read`).
//!
//! A connection ends — every fetch still on it fails, typed, and its endpoint is
//! force-closed — when UCX reports it failed, when the peer breaks the protocol (counted),
//! when a fetch on it is abandoned (timeout: responses are FIFO, one cannot be skipped), when
//! it is not connected within `connect_timeout_ms` (counted), or when idle for
//! `idle_timeout_ms`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_store::BlockId;
use ucx_sys::{status_string, ucs_status_t};

use crate::config::TransportConfig;
use crate::counters::TransportCounters;
use crate::error::TransportError;
use crate::frame::FrameHeader;
use crate::peer::PeerAddr;
use crate::ucx::endpoint::Endpoint;
use crate::ucx::ops::Keep;
use crate::ucx::proto::PayloadPlan;
use crate::ucx::receipt::Receipt;
use crate::ucx::rma::{Rkeys, RmaRead};
use crate::ucx::worker::{ConnId, ConnIds, OpId, OpKind, Worker};

mod read;
mod receive;

use receive::post_header;

/// A fetch on its connection, awaiting its response.
struct Fetch {
    token: u64,
    request: FrameHeader,
    receipt: Box<dyn Receipt>,
}

/// What the connection is receiving.
enum Phase {
    /// Nothing awaited.
    Idle,
    /// The response header of the oldest fetch.
    Header,
    /// Its payload.
    Payload(PayloadPlan),
    /// Get mode: the lease descriptor that follows a `Lease` header.
    Descriptor,
    /// Get mode: the one-sided read of the leased block.
    Reading(RmaRead),
}

/// One peer's connection.
struct Conn {
    peer: PeerAddr,
    ep: Endpoint,
    /// A request send completed (or a response arrived): the wire-up is done.
    connected: bool,
    created: Instant,
    last_used: Instant,
    awaiting: VecDeque<Fetch>,
    phase: Phase,
    /// The header buffer, when no header receive is posted.
    header_buf: Option<Vec<u8>>,
    chunks: Chunks,
    /// Get mode: the endpoint to the server's worker that leased blocks are read through
    /// (made from the first lease's worker address; same `ConnId`, closed with `ep`).
    read_ep: Option<Endpoint>,
    /// The rkeys unpacked on `read_ep` (dropped with it: declared after it).
    rkeys: Rkeys,
}

/// A connection's payload receive buffers, reused from block to block.
#[derive(Default)]
struct Chunks {
    /// Buffers not posted.
    spare: Vec<Vec<u8>>,
    /// Buffers that exist (at most `recv_chunks_posted`).
    allocated: usize,
}

/// Why a connection ended: decides what its fetches are told.
enum Ending {
    /// UCX reported the endpoint failed (or an operation on it).
    Failed(ucs_status_t),
    /// The peer broke the protocol (the oldest fetch was already told how).
    Violation,
    /// A fetch of this block on it timed out or was dropped.
    Abandoned(BlockId),
    /// Not connected within `connect_timeout_ms`.
    ConnectTimeout,
    /// Idle past `idle_timeout_ms` (no fetch on it).
    Idle,
    /// The transport is closing.
    Shutdown,
}

/// Every client connection of one transport.
pub(crate) struct Clients {
    config: TransportConfig,
    counters: Arc<TransportCounters>,
    conns: HashMap<ConnId, Conn>,
    pool: HashMap<PeerAddr, ConnId>,
    tokens: HashMap<u64, ConnId>,
}

impl Clients {
    pub(crate) fn new(config: TransportConfig, counters: Arc<TransportCounters>) -> Clients {
        Clients {
            config,
            counters,
            conns: HashMap::new(),
            pool: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    /// Whether `conn` is one of ours.
    pub(crate) fn owns(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// Starts a fetch (or a probe, or a push with its `body`): connects if needed, sends the
    /// request, awaits the response.
    pub(crate) fn fetch(
        &mut self,
        worker: &Worker,
        ids: &mut ConnIds,
        token: u64,
        (peer, request, body): (PeerAddr, FrameHeader, Option<bytes::Bytes>),
        receipt: Box<dyn Receipt>,
    ) {
        let id = match self.connection(worker, ids, &peer) {
            Ok(id) => id,
            Err(e) => return receipt.fail(e),
        };
        let Some(conn) = self.conns.get_mut(&id) else {
            return receipt.fail(TransportError::Closed);
        };
        conn.ep
            .send(OpKind::Request, Keep::Header(Box::new(request.encode())));
        if let Some(body) = body {
            // A pushed block's bytes, sent as they are, kept alive until UCX is done.
            self.counters.add_bytes_out(body.len() as u64);
            conn.ep.send(OpKind::Request, Keep::Bytes(body));
        }
        conn.awaiting.push_back(Fetch {
            token,
            request,
            receipt,
        });
        conn.last_used = Instant::now();
        self.tokens.insert(token, id);
        if matches!(conn.phase, Phase::Idle) {
            post_header(conn);
        }
    }

    /// The pooled connection to `peer`, created if needed; makes room at `connections_max`
    /// by closing the least recently used idle connection.
    fn connection(
        &mut self,
        worker: &Worker,
        ids: &mut ConnIds,
        peer: &PeerAddr,
    ) -> Result<ConnId, TransportError> {
        if let Some(id) = self.pool.get(peer) {
            return Ok(*id);
        }
        if self.pool.len() >= self.config.connections_max {
            let victim = self
                .conns
                .iter()
                .filter(|(_, c)| c.awaiting.is_empty())
                .min_by_key(|(_, c)| c.last_used)
                .map(|(id, _)| *id);
            let Some(victim) = victim else {
                return Err(TransportError::Connect {
                    peer: peer.clone(),
                    reason: format!(
                        "expected a free connection slot, found all connections_max ({}) in use",
                        self.config.connections_max
                    ),
                });
            };
            self.end(victim, Ending::Idle);
        }
        let id = ids.next();
        let ep = Endpoint::connect(worker, id, peer.addr).map_err(|e| TransportError::Connect {
            peer: peer.clone(),
            reason: e.to_string(),
        })?;
        let now = Instant::now();
        self.conns.insert(
            id,
            Conn {
                peer: peer.clone(),
                ep,
                connected: false,
                created: now,
                last_used: now,
                awaiting: VecDeque::new(),
                phase: Phase::Idle,
                header_buf: None,
                chunks: Chunks::default(),
                read_ep: None,
                rkeys: Rkeys::default(),
            },
        );
        self.pool.insert(peer.clone(), id);
        Ok(id)
    }

    /// The fetch `token` gave up (timeout, or its future was dropped): end its connection.
    pub(crate) fn abandon(&mut self, token: u64) {
        let Some(id) = self.tokens.remove(&token) else {
            return; // Already finished.
        };
        let block = self
            .conns
            .get(&id)
            .and_then(|c| c.awaiting.iter().find(|f| f.token == token))
            .map(|f| f.request.id);
        if let Some(block) = block {
            tracing::debug!(conn = id, %block, "fetch abandoned; closing its UCX endpoint");
            self.end(id, Ending::Abandoned(block));
        }
    }

    /// A request send completed.
    pub(crate) fn on_sent(&mut self, op: OpId, status: ucs_status_t) {
        let Some(conn) = self.conns.get_mut(&op.conn) else {
            return; // Ended: its operations were cancelled.
        };
        if status != ucs_status_t::UCS_OK {
            return self.end(op.conn, Ending::Failed(status));
        }
        conn.ep.send_completed();
        mark_connected(conn, &self.counters);
    }

    /// The endpoint failed.
    pub(crate) fn on_failed(&mut self, conn: ConnId, status: ucs_status_t) {
        self.end(conn, Ending::Failed(status));
    }

    /// Ends connection `id`: every fetch on it fails, its endpoint is force-closed.
    fn end(&mut self, id: ConnId, ending: Ending) {
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        if self.pool.get(&conn.peer) == Some(&id) {
            self.pool.remove(&conn.peer);
        }
        if conn.connected {
            self.counters.connections_closed();
        }
        let progress = match &conn.phase {
            Phase::Payload(p) => format!(
                " after {} of {} payload bytes",
                p.received_bytes(),
                p.length()
            ),
            Phase::Reading(r) => format!(
                " after {} of {} bytes read one-sided",
                r.landed_bytes(),
                r.len()
            ),
            _ => String::new(),
        };
        let peer = conn.peer.clone();
        for (i, fetch) in conn.awaiting.drain(..).enumerate() {
            self.tokens.remove(&fetch.token);
            let error = match &ending {
                Ending::Failed(status) if !conn.connected => TransportError::Connect {
                    peer: peer.clone(),
                    reason: format!("UCX: {}", status_string(*status)),
                },
                Ending::Failed(status) => TransportError::ConnectionLost {
                    peer: peer.clone(),
                    reason: format!(
                        "UCX endpoint failed: {}{}",
                        status_string(*status),
                        if i == 0 { progress.as_str() } else { "" }
                    ),
                },
                Ending::Violation => TransportError::ConnectionLost {
                    peer: peer.clone(),
                    reason: "closed after a protocol violation by the peer".into(),
                },
                Ending::Abandoned(block) => TransportError::ConnectionLost {
                    peer: peer.clone(),
                    reason: format!("closed: the fetch of block {block} on it gave up"),
                },
                Ending::ConnectTimeout => TransportError::Timeout {
                    peer: peer.clone(),
                    what: "connect",
                    after_ms: self.config.connect_timeout_ms,
                },
                Ending::Idle | Ending::Shutdown => TransportError::Closed,
            };
            fetch.receipt.fail(error);
        }
        // Dropping the endpoint force-closes it; posted receives are cancelled and their
        // buffers come back (and are dropped) through their events.
        drop(conn);
    }

    /// Connect and idle timeouts.
    pub(crate) fn tick(&mut self, now: Instant) {
        let connect = Duration::from_millis(self.config.connect_timeout_ms);
        let idle = Duration::from_millis(self.config.idle_timeout_ms);
        let mut ended = Vec::new();
        for (id, c) in &self.conns {
            if !c.connected && now >= c.created + connect {
                ended.push((*id, Ending::ConnectTimeout));
            } else if c.awaiting.is_empty() && now >= c.last_used + idle {
                ended.push((*id, Ending::Idle));
            }
        }
        for (id, ending) in ended {
            if matches!(ending, Ending::ConnectTimeout) {
                self.counters.timeouts();
            }
            self.end(id, ending);
        }
    }

    /// The earliest moment [`Clients::tick`] has something to do.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let connect = Duration::from_millis(self.config.connect_timeout_ms);
        let idle = Duration::from_millis(self.config.idle_timeout_ms);
        self.conns
            .values()
            .filter_map(|c| {
                if !c.connected {
                    Some(c.created + connect)
                } else if c.awaiting.is_empty() {
                    Some(c.last_used + idle)
                } else {
                    None
                }
            })
            .min()
    }

    /// Fails every fetch with [`TransportError::Closed`] and closes every endpoint.
    pub(crate) fn shutdown(&mut self) {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.end(id, Ending::Shutdown);
        }
    }
}

fn mark_connected(conn: &mut Conn, counters: &TransportCounters) {
    if !conn.connected {
        conn.connected = true;
        counters.connections_opened();
    }
}
