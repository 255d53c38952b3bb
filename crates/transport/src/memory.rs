//! [`MemoryTransport`]: the transport between nodes in one process, for deterministic tests of
//! the cluster path, with fault hooks on its [`MemoryNetwork`] — drop, delay, refuse, kill —
//! set by the test as values, never through a global.
//!
//! It behaves as a transport must (it runs the [`crate::conformance`] suite): the same frame
//! headers, encoded and checked by [`crate::frame`] on both sides (so a frame past the
//! receiver's bound is a counted protocol violation); the same streaming verification
//! ([`BlockReceiver`]: bytes are pushed in chunks and hashed as they land); the same bounds
//! (`fetches_in_flight_max`, `fetch_timeout_ms`, `max_frame_bytes`, `connections_max` of
//! peers known at once) and counters; the same typed errors. What it leaves out is the wire:
//! no sockets, no TLS (a peer is found by its address and must carry the name dialled, as a
//! certificate would), no byte copies but the one into the receiver.
//!
//! Faults, per directed link `from → to` (by node name) or per node:
//! - **drop** (`drop_link`, `drop_per_mille`): the request vanishes; the caller waits out its
//!   bound and gets a timeout, as with a lost packet stream;
//! - **delay** (`delay_link`): every exchange on the link waits that long first;
//! - **refuse** (`refuse`): connecting is refused at once ([`TransportError::Connect`]), as
//!   by a port with nothing listening;
//! - **kill** (`kill`, `revive`): the node vanishes as a SIGKILL would make it — requests to
//!   it are never answered (callers time out), and its own calls fail at once.
//!
//! [`Transport::set_aside`] forgets the pair's "connection" (the next exchange counts a new
//! one) and counts it; there is no retransmission backoff to escape here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use tokio::sync::Semaphore;

use crate::config::TransportConfig;
use crate::counters::{CountersSnapshot, TransportCounters};
use crate::error::{bounded, TransportError};
use crate::frame::{
    decode_any_request, decode_response, push_header, FrameHeader, FrameKind, HELD_LENGTH,
};
use crate::message::{no_channel, Channel, MessageHandler, Messenger};
use crate::peer::PeerAddr;
use crate::receive::{BlockReceiver, PayloadSink, ReceiveError};
use crate::source::{Accepted, BlockSource, Holding, SourceLookup};
use crate::transport::{in_order_bounded, Transport, TransportFuture};

/// Bytes handed to a receiver at a time (what one QUIC read might deliver).
const CHUNK_BYTES: usize = 64 * 1024;

/// One node on the network.
struct Node {
    name: String,
    config: TransportConfig,
    source: Arc<dyn BlockSource>,
    channels: Vec<Channel>,
    handlers: HashMap<&'static [u8], Arc<dyn MessageHandler>>,
    counters: Arc<TransportCounters>,
    /// Peers this node has a "connection" with (counted once each).
    connected: BTreeSet<SocketAddr>,
    closed: bool,
}

/// Faults in force.
#[derive(Default)]
struct Faults {
    dropped: BTreeSet<(String, String)>,
    delay_ms: BTreeMap<(String, String), u64>,
    refused: BTreeSet<String>,
    killed: BTreeSet<String>,
    drop_per_mille: u32,
    rng: u64,
}

impl Faults {
    /// xorshift64*: seeded, so a given seed and call order drop the same requests.
    fn roll(&mut self) -> u32 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % 1000
    }
}

#[derive(Default)]
struct State {
    nodes: HashMap<SocketAddr, Node>,
    faults: Faults,
    next: u32,
}

/// The network of one test: every [`MemoryTransport`] joined to it, and the faults in force.
pub struct MemoryNetwork {
    state: Mutex<State>,
}

impl std::fmt::Debug for MemoryNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNetwork").finish_non_exhaustive()
    }
}

/// What an exchange found when it reached its peer.
enum Reach {
    /// The peer's side of the exchange, to run.
    Peer(Box<Served>),
    /// Never answered (dropped, killed): the caller waits out its bound.
    Silent,
}

/// The serving side of one exchange, taken out of the network's lock.
struct Served {
    config: TransportConfig,
    source: Arc<dyn BlockSource>,
    counters: Arc<TransportCounters>,
    handler: Option<Arc<dyn MessageHandler>>,
    delay: Duration,
}

impl MemoryNetwork {
    /// An empty network with no faults; `seed` drives random drops.
    pub fn new(seed: u64) -> Arc<MemoryNetwork> {
        Arc::new(MemoryNetwork {
            state: Mutex::new(State {
                faults: Faults {
                    rng: seed | 1,
                    ..Faults::default()
                },
                ..State::default()
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins node `name` serving `source`, carrying `channels`; its address is a fresh one on
    /// this network.
    pub fn join(
        self: &Arc<Self>,
        name: &str,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
        channels: Vec<Channel>,
    ) -> Result<MemoryTransport, TransportError> {
        let n = {
            let mut s = self.lock();
            s.next += 1;
            s.next
        };
        let addr = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8)),
            7200,
        );
        self.join_at(name, addr, config, source, channels)
    }

    /// [`MemoryNetwork::join`] at `addr` (a cluster config names its members' addresses up
    /// front); an address already taken is refused.
    pub fn join_at(
        self: &Arc<Self>,
        name: &str,
        addr: SocketAddr,
        config: TransportConfig,
        source: Arc<dyn BlockSource>,
        channels: Vec<Channel>,
    ) -> Result<MemoryTransport, TransportError> {
        config.validate()?;
        let mut s = self.lock();
        if s.nodes.contains_key(&addr) {
            return Err(TransportError::Config {
                field: "addr",
                reason: format!("expected a free address on the network, found {addr} taken"),
            });
        }
        let counters = Arc::new(TransportCounters::default());
        s.nodes.insert(
            addr,
            Node {
                name: name.to_owned(),
                config: config.clone(),
                source,
                channels: channels.clone(),
                handlers: HashMap::new(),
                counters: counters.clone(),
                connected: BTreeSet::new(),
                closed: false,
            },
        );
        Ok(MemoryTransport {
            net: Arc::downgrade(self),
            local: PeerAddr::new(name, addr),
            slots: Arc::new(Semaphore::new(config.fetches_in_flight_max)),
            config,
            channels,
            counters,
        })
    }

    /// Requests on `from → to` vanish (their callers time out), until healed.
    pub fn drop_link(&self, from: &str, to: &str) {
        self.lock()
            .faults
            .dropped
            .insert((from.to_owned(), to.to_owned()));
    }

    /// Requests on `from → to` are answered again (the other faults stay).
    pub fn heal_link(&self, from: &str, to: &str) {
        self.lock()
            .faults
            .dropped
            .remove(&(from.to_owned(), to.to_owned()));
    }

    /// Drops requests at random with probability `per_mille / 1000`.
    pub fn drop_per_mille(&self, per_mille: u32) {
        self.lock().faults.drop_per_mille = per_mille.min(1000);
    }

    /// Every exchange on `from → to` waits `ms` first.
    pub fn delay_link(&self, from: &str, to: &str, ms: u64) {
        self.lock()
            .faults
            .delay_ms
            .insert((from.to_owned(), to.to_owned()), ms);
    }

    /// Connections to `node` are refused at once.
    pub fn refuse(&self, node: &str) {
        self.lock().faults.refused.insert(node.to_owned());
    }

    /// `node` vanishes: nothing it is asked is answered, and it can ask nothing.
    pub fn kill(&self, node: &str) {
        self.lock().faults.killed.insert(node.to_owned());
    }

    /// `node` comes back (its source and handlers as they were).
    pub fn revive(&self, node: &str) {
        self.lock().faults.killed.remove(node);
    }

    /// Removes every fault.
    pub fn heal(&self) {
        let mut s = self.lock();
        let f = &mut s.faults;
        f.dropped.clear();
        f.delay_ms.clear();
        f.refused.clear();
        f.killed.clear();
        f.drop_per_mille = 0;
    }

    /// Resolves an exchange from `from` to `to`, applying the faults; `channel` names the
    /// handler a message needs.
    fn reach(
        &self,
        from: &PeerAddr,
        to: &PeerAddr,
        channel: Option<&Channel>,
    ) -> Result<Reach, TransportError> {
        let mut s = self.lock();
        let (caller_killed, peer_name) = {
            let f = &s.faults;
            (
                f.killed.contains(&from.name),
                s.nodes.get(&to.addr).map(|n| n.name.clone()),
            )
        };
        if caller_killed || s.nodes.get(&from.addr).is_none_or(|n| n.closed) {
            return Err(TransportError::Closed);
        }
        let connect = |reason: &str| TransportError::Connect {
            peer: to.clone(),
            reason: reason.to_owned(),
        };
        let Some(peer_name) = peer_name else {
            return Err(connect("nothing listens at that address"));
        };
        if peer_name != to.name {
            // What TLS would refuse: the peer's certificate names another node.
            return Err(TransportError::Handshake {
                peer: to.clone(),
                reason: format!(
                    "expected a certificate for {}, found one for {peer_name}",
                    to.name
                ),
            });
        }
        let link = (from.name.clone(), to.name.clone());
        if s.faults.refused.contains(&to.name) {
            return Err(connect("connection refused"));
        }
        let per_mille = s.faults.drop_per_mille;
        let dropped = s.faults.dropped.contains(&link)
            || s.faults.killed.contains(&to.name)
            || (per_mille > 0 && s.faults.roll() < per_mille);
        let delay = Duration::from_millis(s.faults.delay_ms.get(&link).copied().unwrap_or(0));
        let first_contact = s
            .nodes
            .get_mut(&from.addr)
            .is_some_and(|n| n.connected.insert(to.addr));
        let caller_counters = s.nodes.get(&from.addr).map(|n| n.counters.clone());
        let peer = s.nodes.get(&to.addr).expect("resolved above");
        // A killed node is silent even once its side is stopped (as a SIGKILLed process's
        // port is, to QUIC); only a node closed while alive refuses.
        if peer.closed && !dropped {
            return Err(connect("the peer's transport is closed"));
        }
        if first_contact {
            peer.counters.connections_opened();
            if let Some(c) = caller_counters {
                c.connections_opened();
            }
        }
        if dropped {
            return Ok(Reach::Silent);
        }
        let handler = match channel {
            Some(c) => {
                if !peer.channels.contains(c) {
                    return Err(no_channel(c, &peer.channels));
                }
                Some(peer.handlers.get(c.alpn).cloned().ok_or_else(|| {
                    TransportError::ConnectionLost {
                        peer: to.clone(),
                        reason: format!("no handler for {} yet", c.name()),
                    }
                })?)
            }
            None => None,
        };
        Ok(Reach::Peer(Box::new(Served {
            config: peer.config.clone(),
            source: peer.source.clone(),
            counters: peer.counters.clone(),
            handler,
            delay,
        })))
    }
}

/// One node's transport on a [`MemoryNetwork`].
#[derive(Clone)]
pub struct MemoryTransport {
    net: Weak<MemoryNetwork>,
    local: PeerAddr,
    config: TransportConfig,
    channels: Vec<Channel>,
    counters: Arc<TransportCounters>,
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for MemoryTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTransport")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// Gives a fetch slot's count back however the fetch ends.
struct InFlight<'a>(&'a TransportCounters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_ended();
    }
}

impl MemoryTransport {
    fn network(&self) -> Result<Arc<MemoryNetwork>, TransportError> {
        self.net.upgrade().ok_or(TransportError::Closed)
    }

    /// Reaches `peer`; a silent peer never answers (the caller's bound ends the wait).
    async fn reach(
        &self,
        peer: &PeerAddr,
        channel: Option<&Channel>,
    ) -> Result<Box<Served>, TransportError> {
        match self.network()?.reach(&self.local, peer, channel)? {
            Reach::Peer(s) => {
                if !s.delay.is_zero() {
                    tokio::time::sleep(s.delay).await;
                }
                Ok(s)
            }
            Reach::Silent => std::future::pending().await,
        }
    }

    /// A response header as the peer would send it, decoded and checked as this side would
    /// receive it.
    fn receive_header(
        &self,
        peer: &PeerAddr,
        request: &FrameHeader,
        kind: FrameKind,
        length: u64,
    ) -> Result<FrameHeader, TransportError> {
        let sent = FrameHeader {
            kind,
            length,
            ..*request
        };
        self.counters
            .add_bytes_in(crate::frame::FRAME_HEADER_LEN as u64);
        decode_response(&sent.encode(), request, self.config.max_frame_bytes).map_err(|e| {
            self.counters.protocol_violations();
            TransportError::Protocol {
                peer: peer.clone(),
                error: Box::new(e),
            }
        })
    }

    async fn fetch_once(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> Result<VerifiedBlock, TransportError> {
        let served = self.reach(peer, None).await?;
        let request = FrameHeader::fetch(namespace, id);
        let lookup = tokio::time::timeout(
            served.config.fetch_timeout(),
            served.source.lookup(namespace, id),
        )
        .await
        .unwrap_or(SourceLookup::Unavailable);
        let (kind, bytes) = match lookup {
            SourceLookup::Found(b) if b.len() as u64 <= served.config.max_frame_bytes => {
                (FrameKind::Block, b)
            }
            SourceLookup::Found(_) | SourceLookup::Unavailable => {
                (FrameKind::Unavailable, bytes::Bytes::new())
            }
            SourceLookup::NotFound => (FrameKind::NotFound, bytes::Bytes::new()),
        };
        match kind {
            FrameKind::Block => served.counters.blocks_served(),
            _ => served.counters.not_found_served(),
        }
        served
            .counters
            .add_bytes_out((crate::frame::FRAME_HEADER_LEN + bytes.len()) as u64);
        let answer = self.receive_header(peer, &request, kind, bytes.len() as u64)?;
        match answer.kind {
            FrameKind::Block => {}
            FrameKind::NotFound => {
                return Err(TransportError::NotFound {
                    peer: peer.clone(),
                    id,
                })
            }
            _ => {
                return Err(TransportError::Unavailable {
                    peer: peer.clone(),
                    id,
                })
            }
        }
        let mut receiver = BlockReceiver::new(namespace, id);
        receiver.begin(answer.length);
        for chunk in bytes.chunks(CHUNK_BYTES) {
            self.counters.add_bytes_in(chunk.len() as u64);
            receiver
                .push(chunk)
                .map_err(|e| self.receipt(peer, id, e))?;
        }
        receiver.finish().map_err(|e| self.receipt(peer, id, e))
    }

    /// A receipt that went wrong, typed and counted.
    fn receipt(&self, peer: &PeerAddr, id: BlockId, e: ReceiveError) -> TransportError {
        let peer = peer.clone();
        match e {
            ReceiveError::HashMismatch { expected, found } => {
                self.counters.verify_failures();
                TransportError::VerifyFailed {
                    peer,
                    expected,
                    found,
                }
            }
            ReceiveError::Truncated { expected, found } => TransportError::Truncated {
                peer,
                id,
                expected,
                found,
            },
            ReceiveError::Overrun { expected, found } => TransportError::Overrun {
                peer,
                id,
                expected,
                found,
            },
        }
    }

    async fn push_once(
        &self,
        peer: &PeerAddr,
        block: &VerifiedBlock,
    ) -> Result<(), TransportError> {
        let served = self.reach(peer, None).await?;
        let bytes = block.bytes();
        let request = push_header(block.namespace(), block.id(), bytes.len() as u64);
        self.counters
            .add_bytes_out((crate::frame::FRAME_HEADER_LEN + bytes.len()) as u64);
        // The peer checks the header as its server would, then receives and verifies.
        let kind = match decode_any_request(&request.encode(), served.config.max_frame_bytes) {
            Err(e) => {
                served.counters.protocol_violations();
                return Err(TransportError::ConnectionLost {
                    peer: peer.clone(),
                    reason: format!("the peer closed the connection: {e}"),
                });
            }
            Ok(h) => {
                let mut receiver = BlockReceiver::new(h.namespace, h.id);
                receiver.begin(h.length);
                for chunk in bytes.chunks(CHUNK_BYTES) {
                    served.counters.add_bytes_in(chunk.len() as u64);
                    let _ = receiver.push(chunk);
                }
                match receiver.finish() {
                    Ok(b) => {
                        let accept = served.source.accept(b);
                        match tokio::time::timeout(served.config.fetch_timeout(), accept).await {
                            Ok(Accepted::Stored) => {
                                served.counters.pushes_stored();
                                FrameKind::Stored
                            }
                            Ok(Accepted::Unavailable) | Err(_) => FrameKind::Unavailable,
                        }
                    }
                    Err(_) => {
                        served.counters.verify_failures();
                        served.counters.pushes_rejected();
                        FrameKind::Rejected
                    }
                }
            }
        };
        let answer = self.receive_header(peer, &request, kind, 0)?;
        match answer.kind {
            FrameKind::Stored => Ok(()),
            FrameKind::Rejected => Err(TransportError::Rejected {
                peer: peer.clone(),
                id: block.id(),
            }),
            _ => Err(TransportError::Unavailable {
                peer: peer.clone(),
                id: block.id(),
            }),
        }
    }

    async fn probe_once(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> Result<u64, TransportError> {
        let served = self.reach(peer, None).await?;
        let request = FrameHeader::request(FrameKind::Probe, namespace, id);
        let held = tokio::time::timeout(
            served.config.fetch_timeout(),
            served.source.holds(namespace, id),
        )
        .await
        .unwrap_or(Holding::Unavailable);
        served.counters.probes_served();
        let (kind, len) = match held {
            Holding::Held(len) => (FrameKind::Held, Some(len)),
            Holding::NotFound => (FrameKind::NotFound, None),
            Holding::Unavailable => (FrameKind::Unavailable, None),
        };
        let length = len.map_or(0, |_| HELD_LENGTH);
        let answer = self.receive_header(peer, &request, kind, length)?;
        match (answer.kind, len) {
            (FrameKind::Held, Some(len)) => Ok(len),
            (FrameKind::NotFound, _) => Err(TransportError::NotFound {
                peer: peer.clone(),
                id,
            }),
            _ => Err(TransportError::Unavailable {
                peer: peer.clone(),
                id,
            }),
        }
    }
}

impl Transport for MemoryTransport {
    fn fetch<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<VerifiedBlock, TransportError>> {
        Box::pin(async move {
            let attempt = async {
                let _permit = self
                    .slots
                    .acquire()
                    .await
                    .map_err(|_| TransportError::Closed)?;
                self.counters.fetch_started();
                let _in_flight = InFlight(&self.counters);
                self.fetch_once(peer, namespace, id).await
            };
            let limit = self.config.fetch_timeout();
            let r = bounded(limit, &self.counters, peer, "fetch", attempt).await;
            match &r {
                Ok(_) => self.counters.fetches_ok(),
                Err(_) => self.counters.fetches_failed(),
            }
            r
        })
    }

    fn fetch_many<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        ids: &'a [BlockId],
    ) -> TransportFuture<'a, Vec<Result<VerifiedBlock, TransportError>>> {
        Box::pin(async move {
            let width = self.config.fetches_in_flight_max;
            in_order_bounded(ids, width, |id| {
                let (this, peer) = (self.clone(), peer.clone());
                async move { this.fetch(&peer, namespace, id).await }
            })
            .await
        })
    }

    fn push<'a>(
        &'a self,
        peer: &'a PeerAddr,
        block: &'a VerifiedBlock,
    ) -> TransportFuture<'a, Result<(), TransportError>> {
        Box::pin(async move {
            let attempt = async {
                let _permit = self
                    .slots
                    .acquire()
                    .await
                    .map_err(|_| TransportError::Closed)?;
                self.push_once(peer, block).await
            };
            let limit = self.config.fetch_timeout();
            let r = bounded(limit, &self.counters, peer, "push", attempt).await;
            match &r {
                Ok(()) => self.counters.pushes_ok(),
                Err(_) => self.counters.pushes_failed(),
            }
            r
        })
    }

    fn probe<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<u64, TransportError>> {
        Box::pin(async move {
            let probe = self.probe_once(peer, namespace, id);
            let limit = self.config.fetch_timeout();
            let r = bounded(limit, &self.counters, peer, "probe", probe).await;
            match &r {
                Ok(_)
                | Err(TransportError::NotFound { .. } | TransportError::Unavailable { .. }) => {
                    self.counters.probes_ok()
                }
                Err(_) => self.counters.probes_failed(),
            }
            r
        })
    }

    fn set_aside(&self, peer: &PeerAddr, _since: std::time::Instant) {
        // No wire and no backoff: every exchange reaches the peer's current state. What is
        // modelled is the bookkeeping: the pair's "connection" is forgotten (the next
        // exchange counts a new one) and the setting aside counted, so tests see the fabric
        // ask for it. Unlike QUIC, it does not check when the connection was made or last
        // answered.
        let Some(net) = self.net.upgrade() else {
            return;
        };
        let mut s = net.lock();
        if let Some(n) = s.nodes.get_mut(&self.local.addr) {
            if n.connected.remove(&peer.addr) {
                self.counters.connections_set_aside();
            }
        }
    }

    fn local_peer(&self) -> PeerAddr {
        self.local.clone()
    }

    fn counters(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }

    fn close(&self) -> TransportFuture<'_, ()> {
        Box::pin(async move {
            self.slots.close();
            if let Ok(net) = self.network() {
                if let Some(n) = net.lock().nodes.get_mut(&self.local.addr) {
                    n.closed = true;
                }
            }
        })
    }
}

impl Messenger for MemoryTransport {
    fn serve(
        &self,
        channel: Channel,
        handler: Arc<dyn MessageHandler>,
    ) -> Result<(), TransportError> {
        if !self.channels.contains(&channel) {
            return Err(no_channel(&channel, &self.channels));
        }
        let net = self.network()?;
        let mut s = net.lock();
        let node = s
            .nodes
            .get_mut(&self.local.addr)
            .ok_or(TransportError::Closed)?;
        node.handlers.insert(channel.alpn, handler);
        Ok(())
    }

    fn call<'a>(
        &'a self,
        channel: Channel,
        peer: &'a PeerAddr,
        request: Vec<u8>,
        limit: Duration,
    ) -> TransportFuture<'a, Result<Vec<u8>, TransportError>> {
        Box::pin(async move {
            if !self.channels.contains(&channel) {
                return Err(no_channel(&channel, &self.channels));
            }
            channel.check_len(peer, request.len())?;
            let attempt = async {
                let served = self.reach(peer, Some(&channel)).await?;
                let handler = served.handler.expect("a message reaches a handler");
                let answer = tokio::time::timeout(
                    Duration::from_millis(channel.handle_timeout_ms),
                    handler.handle(request),
                )
                .await
                .ok()
                .flatten()
                .ok_or_else(|| TransportError::ConnectionLost {
                    peer: peer.clone(),
                    reason: "the stream was reset without an answer".into(),
                })?;
                channel.check_len(peer, answer.len())?;
                served.counters.messages_served();
                Ok(answer)
            };
            let r = bounded(limit, &self.counters, peer, "message", attempt).await;
            match &r {
                Ok(_) => self.counters.messages_ok(),
                Err(_) => self.counters.messages_failed(),
            }
            r
        })
    }
}
