//! The fetching side: one pooled connection per peer and channel (blocks, and each message
//! channel by its ALPN), a stream per block, push, probe or message, a bounded number of
//! transfers in flight, every one bounded in time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kvfabric_store::{BlockId, NamespaceKey};
use quinn::Connection;
use tokio::sync::oneshot::Sender;
use tokio::sync::Semaphore;

use crate::config::TransportConfig;
use crate::counters::TransportCounters;
use crate::error::{bounded, TransportError};
use crate::frame::{FrameError, FrameHeader, FrameKind};
use crate::peer::PeerAddr;
use crate::quic::errors;
use crate::quic::path::PathKind;
use crate::receive::{PayloadSink, ReceiveError};

/// One peer's connection, shared by every fetch from that peer.
struct Slot {
    conn: tokio::sync::Mutex<Option<Connection>>,
    last_used_ms: AtomicU64,
    /// When its connection was made (`None` while it has none, or a dial is on).
    made: Mutex<Option<Instant>>,
    /// When the peer last answered an exchange on it, in ms since the client's epoch.
    heard_ms: AtomicU64,
    /// Dropped with the slot (the pool forgot it) or when the slot's connection is replaced:
    /// the connection's watcher then lets its handle go, so the connection closes as soon as
    /// the last call on it does (quinn closes a connection when its last handle is dropped).
    retire: Mutex<Option<Sender<()>>>,
}

/// Which connections a pool entry is: index 0 carries blocks, `i` the channel `i - 1`.
pub(crate) type ChannelIndex = usize;
/// The block connections' index.
pub(crate) const BLOCKS: ChannelIndex = 0;

/// Everything the fetching side owns.
pub(crate) struct Client {
    pub(crate) endpoint: quinn::Endpoint,
    /// Client configs per channel index (the ALPN differs), one per kind of path
    /// ([`PathKind::index`]): a dial uses the one of the path to the address it dials.
    pub(crate) client_configs: Vec<[quinn::ClientConfig; 2]>,
    pub(crate) config: TransportConfig,
    pub(crate) counters: Arc<TransportCounters>,
    pub(crate) fetch_slots: Arc<Semaphore>,
    pool: Mutex<HashMap<(PeerAddr, ChannelIndex), Arc<Slot>>>,
    epoch: Instant,
}

/// Gives a fetch slot's count back however the fetch ends (including cancellation).
struct InFlight<'a>(&'a TransportCounters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_ended();
    }
}

/// What a dial needs, owned, so that it runs in a task of its own.
struct Dial {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    peer: PeerAddr,
    connect_timeout: std::time::Duration,
    counters: Arc<TransportCounters>,
}

impl Dial {
    /// The live connection in `slot`, or a new one (stored there). A caller that gave up
    /// while this waited for the slot (another dial in progress) starts no dial: only a
    /// caller still waiting does, so a dead peer is dialled once at a time, not once per
    /// abandoned call.
    async fn on(
        self,
        slot: Arc<Slot>,
        caller: &Sender<Result<Connection, TransportError>>,
    ) -> Result<Connection, TransportError> {
        let peer = &self.peer;
        let mut guard = slot.conn.lock().await;
        if let Some(conn) = guard.as_ref() {
            if conn.close_reason().is_none() {
                return Ok(conn.clone());
            }
        }
        *guard = None;
        *slot.made.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if caller.is_closed() {
            return Err(TransportError::Connect {
                peer: peer.clone(),
                reason: "nobody waits for this dial any more".into(),
            });
        }
        let connecting = self
            .endpoint
            .connect_with(self.config, peer.addr, &peer.name)
            .map_err(|e| TransportError::Connect {
                peer: peer.clone(),
                reason: e.to_string(),
            })?;
        let connected = async { connecting.await.map_err(|e| errors::connection(peer, e)) };
        let conn = bounded(
            self.connect_timeout,
            &self.counters,
            peer,
            "connect",
            connected,
        )
        .await?;
        self.counters.connections_opened();
        let (watched, counters) = (conn.clone(), self.counters.clone());
        let (retire, retired) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            // Holding a handle keeps the connection open: only until it closes, or until the
            // pool forgets it (a forgotten connection kept by this handle would otherwise stay
            // open, kept alive by keep-alives, for the life of the process, and hold one of
            // the peer's `connections_max` slots).
            tokio::select! {
                _ = watched.closed() => {}
                _ = retired => {}
            }
            drop(watched);
            counters.connections_closed();
        });
        *slot.retire.lock().unwrap_or_else(|e| e.into_inner()) = Some(retire);
        *slot.made.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        *guard = Some(conn.clone());
        Ok(conn)
    }
}

impl Client {
    pub(crate) fn new(
        endpoint: quinn::Endpoint,
        client_configs: Vec<[quinn::ClientConfig; 2]>,
        config: TransportConfig,
        counters: Arc<TransportCounters>,
    ) -> Client {
        Client {
            endpoint,
            client_configs,
            fetch_slots: Arc::new(Semaphore::new(config.fetches_in_flight_max)),
            config,
            counters,
            pool: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        }
    }

    /// One fetch from one peer into `sink`, bounded by `fetch_timeout_ms`, counted.
    pub(crate) async fn fetch<S: PayloadSink>(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
        sink: S,
    ) -> Result<S::Output, TransportError> {
        let attempt = async {
            let _permit = self
                .fetch_slots
                .acquire()
                .await
                .map_err(|_| TransportError::Closed)?;
            self.counters.fetch_started();
            let _in_flight = InFlight(&self.counters);
            let conn = self.connection(peer, BLOCKS).await?;
            let (conn, recv, length) = match self.request_block(&conn, peer, namespace, id).await {
                // The pooled connection was lost before the peer answered: a peer that
                // restarted resets its previous process's connections at once (the node's
                // stateless-reset key), so one more try on a fresh connection reaches the new
                // process instead of failing the read. Nothing was received yet.
                Err(TransportError::ConnectionLost { .. }) if conn.close_reason().is_some() => {
                    self.counters.redials();
                    let fresh = self.connection(peer, BLOCKS).await?;
                    let (recv, length) = self.request_block(&fresh, peer, namespace, id).await?;
                    (fresh, recv, length)
                }
                answer => {
                    let (recv, length) = answer?;
                    (conn, recv, length)
                }
            };
            self.receive_block(&conn, peer, id, recv, length, sink)
                .await
        };
        let fetch_timeout = self.config.fetch_timeout();
        let result = bounded(fetch_timeout, &self.counters, peer, "fetch", attempt).await;
        match &result {
            Ok(_) => self.counters.fetches_ok(),
            Err(e) => {
                self.counters.fetches_failed();
                if matches!(e, TransportError::Handshake { .. }) {
                    self.counters.handshakes_refused();
                }
            }
        }
        result
    }

    /// The pooled connection to `peer` for `channel`, connecting (once, however many callers
    /// wait) if needed. The dial runs in a task of its own, bounded by `connect_timeout_ms`
    /// alone: a caller with a shorter bound (a Raft heartbeat has 100 ms) that gives up does
    /// not abort it, so on a loaded machine a handshake slower than every caller's bound still
    /// completes, and the next caller finds the connection ready.
    pub(crate) async fn connection(
        &self,
        peer: &PeerAddr,
        channel: ChannelIndex,
    ) -> Result<Connection, TransportError> {
        let slot = self.slot(peer, channel)?;
        slot.last_used_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        if let Ok(guard) = slot.conn.try_lock() {
            if let Some(conn) = guard.as_ref().filter(|c| c.close_reason().is_none()) {
                return Ok(conn.clone());
            }
        }
        let dial = Dial {
            endpoint: self.endpoint.clone(),
            config: self.client_configs[channel][PathKind::of(peer.addr).index()].clone(),
            peer: peer.clone(),
            connect_timeout: self.config.connect_timeout(),
            counters: self.counters.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let r = dial.on(slot, &tx).await;
            let _ = tx.send(r);
        });
        rx.await.unwrap_or_else(|_| {
            Err(TransportError::Connect {
                peer: peer.clone(),
                reason: "the dial task ended without an answer".into(),
            })
        })
    }

    fn slot(&self, peer: &PeerAddr, channel: ChannelIndex) -> Result<Arc<Slot>, TransportError> {
        let key = (peer.clone(), channel);
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = pool.get(&key) {
            return Ok(slot.clone());
        }
        if pool.len() >= self.config.connections_max {
            // Only entries nobody is using (the map holds the one reference) may go.
            let victim = pool
                .iter()
                .filter(|(_, s)| Arc::strong_count(s) == 1)
                .min_by_key(|(_, s)| s.last_used_ms.load(Ordering::Relaxed))
                .map(|(p, _)| p.clone());
            let Some(victim) = victim else {
                return Err(TransportError::Connect {
                    peer: peer.clone(),
                    reason: format!(
                        "expected a free connection slot, found all connections_max ({}) in use",
                        self.config.connections_max
                    ),
                });
            };
            if let Some(slot) = pool.remove(&victim) {
                if let Ok(mut conn) = slot.conn.try_lock() {
                    if let Some(conn) = conn.take() {
                        conn.close(errors::CLOSE_EVICTED, b"evicted");
                    }
                }
            }
        }
        let slot = Arc::new(Slot {
            conn: tokio::sync::Mutex::new(None),
            last_used_ms: AtomicU64::new(0),
            made: Mutex::new(None),
            heard_ms: AtomicU64::new(0),
            retire: Mutex::new(None),
        });
        pool.insert(key, slot.clone());
        Ok(slot)
    }

    /// Forgets the pooled connection to `peer` for `channel` if it is still `failed` (the
    /// connection a call failed on, by its stable id), so that the next call dials again. It
    /// is not closed: other calls in flight on it finish or fail on their own (closing it
    /// failed them all, and each of those failures then dropped the connection another call
    /// had just dialled, so a loaded peer whose one RPC was slow stayed unreachable), and it
    /// closes once the last of them lets it go (the slot's `retire` releases the watcher's
    /// handle when the slot is dropped).
    pub(crate) fn forget(&self, peer: &PeerAddr, channel: ChannelIndex, failed: Option<usize>) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let key = (peer.clone(), channel);
        let Some(slot) = pool.get(&key) else { return };
        let same = match slot.conn.try_lock() {
            Ok(conn) => match (conn.as_ref(), failed) {
                (Some(c), Some(id)) => c.stable_id() == id,
                // Failed before it had a connection (the dial): drop the slot if idle.
                (None, _) => true,
                (Some(_), None) => false,
            },
            // Someone is dialling on it right now: theirs is a fresh connection.
            Err(_) => false,
        };
        if same {
            pool.remove(&key);
        }
    }

    /// Sets aside the pooled block connection to `peer` if it was made before `since` (its
    /// peer fell silent on an exchange begun then) and no exchange on it has been answered
    /// since: the next exchange dials afresh, the ones on it go on, and it closes when they
    /// end (as [`Client::forget`]). A connection made since, one still answering (a slow
    /// exchange beside quick ones), or a dial under way is left alone.
    pub(crate) fn set_aside(&self, peer: &PeerAddr, since: Instant) {
        let since_ms = since.saturating_duration_since(self.epoch).as_millis() as u64;
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let key = (peer.clone(), BLOCKS);
        let Some(slot) = pool.get(&key) else { return };
        let made = *slot.made.lock().unwrap_or_else(|e| e.into_inner());
        let answering = slot.heard_ms.load(Ordering::Relaxed) > since_ms;
        if made.is_some_and(|m| m < since) && !answering {
            pool.remove(&key);
            self.counters.connections_set_aside();
        }
    }

    /// `peer` answered an exchange on its block connection just now.
    pub(super) fn heard(&self, peer: &PeerAddr) {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = pool.get(&(peer.clone(), BLOCKS)) {
            slot.heard_ms.fetch_max(now_ms, Ordering::Relaxed);
        }
    }

    pub(crate) fn connection_stats(&self, peer: &PeerAddr) -> Option<quinn::ConnectionStats> {
        let slot = self
            .pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(peer.clone(), BLOCKS))
            .cloned()?;
        let guard = slot.conn.try_lock().ok()?;
        guard.as_ref().map(|c| c.stats())
    }

    /// A peer broke the protocol: count it, close its connection, report it.
    pub(crate) fn violation(
        &self,
        conn: &Connection,
        peer: &PeerAddr,
        error: FrameError,
    ) -> TransportError {
        self.counters.protocol_violations();
        conn.close(
            errors::CLOSE_PROTOCOL_VIOLATION,
            error.to_string().as_bytes(),
        );
        TransportError::Protocol {
            peer: peer.clone(),
            error: Box::new(error),
        }
    }

    /// The request and the response header: the stream the payload follows on, and its
    /// length (a `Block` answer; not-found and unavailable are typed errors).
    async fn request_block(
        &self,
        conn: &Connection,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> Result<(quinn::RecvStream, u64), TransportError> {
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|e| errors::connection(peer, e))?;
        let request = FrameHeader::fetch(namespace, id);
        send.write_all(&request.encode())
            .await
            .map_err(|e| errors::write(peer, e))?;
        // Only fails if the stream is already closed, which the read below reports.
        send.finish().ok();

        let response = self.answer(conn, peer, &mut recv, &request).await?;
        match response.kind {
            FrameKind::Block => {}
            FrameKind::NotFound => {
                return Err(TransportError::NotFound {
                    peer: peer.clone(),
                    id,
                })
            }
            // decode_response lets only Block, NotFound and Unavailable answer a Fetch.
            FrameKind::Unavailable
            | FrameKind::Fetch
            | FrameKind::Lease
            | FrameKind::FetchRma
            | FrameKind::Release
            | FrameKind::Push
            | FrameKind::Stored
            | FrameKind::Rejected
            | FrameKind::Probe
            | FrameKind::Held => {
                return Err(TransportError::Unavailable {
                    peer: peer.clone(),
                    id,
                })
            }
        }
        Ok((recv, response.length))
    }

    /// The payload of `length` bytes into `sink`, chunk by chunk as it arrives, verified.
    async fn receive_block<S: PayloadSink>(
        &self,
        conn: &Connection,
        peer: &PeerAddr,
        id: BlockId,
        mut recv: quinn::RecvStream,
        length: u64,
        mut sink: S,
    ) -> Result<S::Output, TransportError> {
        sink.begin(length);
        loop {
            match recv.read_chunk(usize::MAX, true).await {
                Ok(Some(chunk)) => {
                    self.counters.add_bytes_in(chunk.bytes.len() as u64);
                    if let Err(ReceiveError::Overrun { expected, found }) = sink.push(&chunk.bytes)
                    {
                        self.violation(conn, peer, FrameError::TrailingBytes { expected });
                        return Err(TransportError::Overrun {
                            peer: peer.clone(),
                            id,
                            expected,
                            found,
                        });
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(errors::read(peer, e)),
            }
        }
        sink.finish().map_err(|e| match e {
            ReceiveError::HashMismatch { expected, found } => {
                self.counters.verify_failures();
                TransportError::VerifyFailed {
                    peer: peer.clone(),
                    expected,
                    found,
                }
            }
            ReceiveError::Truncated { expected, found } => {
                // The peer ended the stream short of what it announced: a broken frame.
                self.counters.protocol_violations();
                conn.close(errors::CLOSE_PROTOCOL_VIOLATION, b"truncated block");
                TransportError::Truncated {
                    peer: peer.clone(),
                    id,
                    expected,
                    found,
                }
            }
            ReceiveError::Overrun { expected, found } => TransportError::Overrun {
                peer: peer.clone(),
                id,
                expected,
                found,
            },
        })
    }
}
