//! The serving side: accept connections (mTLS, at most `connections_max`); on each block
//! stream read one request and answer it — a fetch with the block's bytes unchanged, a probe
//! with whether it is held, a push by receiving its bytes through the verifying
//! [`BlockReceiver`] and handing the verified block to the source — and on each stream of a
//! message channel (told apart by the connection's ALPN) hand the request to the channel's
//! handler and send back its answer.
//!
//! A peer that sends a malformed, truncated or oversized request has its connection closed
//! and counted; other connections are untouched. Each stream is bounded in time: the request
//! by `request_timeout_ms`, the lookup and the send by `fetch_timeout_ms`, and a lookup is
//! abandoned as soon as the client stops the stream.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use quinn::{Connection, Incoming, ReadExactError, RecvStream, SendStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::config::TransportConfig;
use crate::counters::TransportCounters;
use crate::frame::{decode_any_request, FrameError, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::message::{Channel, MessageHandler, MESSAGE_LEN_BYTES};
use crate::quic::errors;
use crate::quic::path::PathKind;
use crate::receive::{BlockReceiver, PayloadSink, ReceiveError};
use crate::source::{Accepted, BlockSource, Holding, SourceLookup};

/// Everything the serving side owns.
pub(crate) struct Server {
    pub(crate) config: TransportConfig,
    pub(crate) counters: Arc<TransportCounters>,
    pub(crate) source: Arc<dyn BlockSource>,
    pub(crate) connections: Arc<Semaphore>,
    /// The message channels served beside blocks, and each one's handler once registered.
    pub(crate) channels: Vec<Channel>,
    pub(crate) handlers: std::sync::RwLock<Vec<Option<Arc<dyn MessageHandler>>>>,
    /// The server config of each kind of path ([`PathKind::index`]): a connection is accepted
    /// with the one of the path it came over.
    pub(crate) path_configs: [Arc<quinn::ServerConfig>; 2],
}

/// Why a request was not read.
enum RequestError {
    /// The client broke the protocol; its connection is closed.
    Violation(FrameError),
    /// The stream or connection went away; nothing to answer.
    Lost,
}

impl Server {
    /// Accepts until the endpoint closes.
    pub(crate) async fn accept_loop(self: Arc<Self>, endpoint: quinn::Endpoint) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                incoming = endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    match self.connections.clone().try_acquire_owned() {
                        Ok(permit) => {
                            connections.spawn(self.clone().connection(incoming, permit));
                        }
                        Err(_) => {
                            tracing::warn!(remote = %incoming.remote_address(), "connections_max reached; refusing");
                            incoming.refuse();
                        }
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    }

    async fn connection(self: Arc<Self>, incoming: Incoming, _permit: OwnedSemaphorePermit) {
        let remote = incoming.remote_address();
        let path = self.path_configs[PathKind::of(remote).index()].clone();
        let connecting = match incoming.accept_with(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%remote, error = %e, "incoming connection failed");
                return;
            }
        };
        let conn = match tokio::time::timeout(self.config.connect_timeout(), connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                if errors::is_handshake_refusal(&e) {
                    self.counters.handshakes_refused();
                    tracing::warn!(%remote, error = %e, "handshake refused");
                }
                return;
            }
            Err(_) => {
                self.counters.timeouts();
                return;
            }
        };
        self.counters.connections_opened();
        let alpn = conn
            .handshake_data()
            .and_then(|h| h.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|h| h.protocol);
        // The block ALPN, or a channel's: the handshake agreed on one this server offered.
        let channel = alpn
            .as_deref()
            .and_then(|a| self.channels.iter().position(|c| c.alpn == a));
        let mut streams = JoinSet::new();
        loop {
            tokio::select! {
                accepted = conn.accept_bi() => match accepted {
                    Ok((send, recv)) => match channel {
                        None => {
                            streams.spawn(self.clone().stream(conn.clone(), remote, send, recv));
                        }
                        Some(i) => {
                            streams.spawn(self.clone().message(i, remote, send, recv));
                        }
                    },
                    Err(_) => break,
                },
                Some(_) = streams.join_next(), if !streams.is_empty() => {}
            }
        }
        self.counters.connections_closed();
    }

    async fn read_request(
        recv: &mut RecvStream,
        max_frame_bytes: u64,
    ) -> Result<FrameHeader, RequestError> {
        let mut head = [0u8; FRAME_HEADER_LEN];
        match recv.read_exact(&mut head).await {
            Ok(()) => {}
            Err(ReadExactError::FinishedEarly(found)) => {
                return Err(RequestError::Violation(FrameError::Truncated {
                    expected: FRAME_HEADER_LEN,
                    found,
                }))
            }
            Err(ReadExactError::ReadError(_)) => return Err(RequestError::Lost),
        }
        let request =
            decode_any_request(&head, max_frame_bytes).map_err(RequestError::Violation)?;
        // One-sided reads (`FetchRma`, `Release`) are a UCX mode; over QUIC only these.
        if !matches!(
            request.kind,
            FrameKind::Fetch | FrameKind::Probe | FrameKind::Push
        ) {
            return Err(RequestError::Violation(FrameError::UnexpectedKind {
                expected: "Fetch, Probe or Push",
                found: request.kind,
            }));
        }
        if request.kind == FrameKind::Push {
            return Ok(request); // Its block follows.
        }
        // A request is the header and nothing else: the stream must end right there.
        match recv.read_chunk(1, true).await {
            Ok(None) => Ok(request),
            Ok(Some(_)) => Err(RequestError::Violation(FrameError::TrailingBytes {
                expected: FRAME_HEADER_LEN as u64,
            })),
            Err(_) => Err(RequestError::Lost),
        }
    }

    async fn stream(
        self: Arc<Self>,
        conn: Connection,
        remote: SocketAddr,
        mut send: SendStream,
        mut recv: RecvStream,
    ) {
        let request = match tokio::time::timeout(
            self.config.request_timeout(),
            Self::read_request(&mut recv, self.config.max_frame_bytes),
        )
        .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(RequestError::Violation(e))) => {
                self.counters.protocol_violations();
                tracing::warn!(%remote, error = %e, "protocol violation; closing the connection");
                conn.close(errors::CLOSE_PROTOCOL_VIOLATION, e.to_string().as_bytes());
                return;
            }
            Ok(Err(RequestError::Lost)) => return,
            Err(_) => {
                self.counters.timeouts();
                send.reset(errors::CLOSE_PROTOCOL_VIOLATION).ok();
                return;
            }
        };
        let stopped = send.stopped();
        let served = tokio::time::timeout(self.config.fetch_timeout(), async {
            match request.kind {
                FrameKind::Push => {
                    self.take_push(&conn, &mut send, recv, &request, remote)
                        .await
                }
                FrameKind::Probe => {
                    let held = tokio::select! {
                        h = self.source.holds(request.namespace, request.id) => h,
                        _ = stopped => return,
                    };
                    self.answer_probe(&mut send, &request, held).await;
                }
                _ => {
                    let lookup = tokio::select! {
                        l = self.source.lookup(request.namespace, request.id) => l,
                        _ = stopped => return,
                    };
                    self.respond(&mut send, &request, lookup, remote).await;
                }
            }
        });
        if served.await.is_err() {
            self.counters.timeouts();
            send.reset(errors::CLOSE_SHUTDOWN).ok();
        }
    }

    async fn respond(
        &self,
        send: &mut SendStream,
        request: &FrameHeader,
        lookup: SourceLookup,
        remote: SocketAddr,
    ) {
        let (kind, body) = match lookup {
            SourceLookup::Found(bytes) if bytes.len() as u64 <= self.config.max_frame_bytes => {
                #[cfg(feature = "planted-bugs")]
                let bytes = if crate::planted::active("lying-peer") {
                    crate::planted::lie(&bytes)
                } else {
                    bytes
                };
                (FrameKind::Block, bytes)
            }
            SourceLookup::Found(bytes) => {
                tracing::warn!(id = %request.id, len = bytes.len(), max = self.config.max_frame_bytes,
                    "block exceeds max_frame_bytes; answering unavailable");
                (FrameKind::Unavailable, Bytes::new())
            }
            SourceLookup::NotFound => (FrameKind::NotFound, Bytes::new()),
            SourceLookup::Unavailable => (FrameKind::Unavailable, Bytes::new()),
        };
        let header = FrameHeader {
            kind,
            length: body.len() as u64,
            ..*request
        };
        let total = (FRAME_HEADER_LEN + body.len()) as u64;
        // The block's bytes go out as the source holds them: no re-encoding, no copy here.
        let mut chunks = [Bytes::copy_from_slice(&header.encode()), body];
        if let Err(e) = send.write_all_chunks(&mut chunks).await {
            tracing::debug!(%remote, error = %e, "client went away mid-send");
            return;
        }
        send.finish().ok();
        self.counters.add_bytes_out(total);
        match kind {
            FrameKind::Block => self.counters.blocks_served(),
            _ => self.counters.not_found_served(),
        }
    }

    /// A push: its block into the verifying receiver, then to the source; answers `Stored`,
    /// `Rejected` (the bytes hash to another id) or `Unavailable`.
    async fn take_push(
        &self,
        conn: &Connection,
        send: &mut SendStream,
        mut recv: RecvStream,
        request: &FrameHeader,
        remote: SocketAddr,
    ) {
        let mut receiver = BlockReceiver::new(request.namespace, request.id);
        receiver.begin(request.length);
        loop {
            match recv.read_chunk(usize::MAX, true).await {
                Ok(Some(chunk)) => {
                    self.counters.add_bytes_in(chunk.bytes.len() as u64);
                    if let Err(ReceiveError::Overrun { expected, .. }) = receiver.push(&chunk.bytes)
                    {
                        return self.violation(
                            conn,
                            remote,
                            FrameError::TrailingBytes { expected },
                        );
                    }
                }
                Ok(None) => break,
                Err(_) => return, // The pusher went away: nothing to answer.
            }
        }
        let kind = match receiver.finish() {
            Ok(block) => match self.source.accept(block).await {
                Accepted::Stored => {
                    self.counters.pushes_stored();
                    FrameKind::Stored
                }
                Accepted::Unavailable => FrameKind::Unavailable,
            },
            Err(ReceiveError::HashMismatch { expected, found }) => {
                self.counters.verify_failures();
                self.counters.pushes_rejected();
                tracing::warn!(%remote, %expected, %found, "a pushed block failed verification");
                FrameKind::Rejected
            }
            Err(ReceiveError::Truncated { expected, found }) => {
                let e = FrameError::Truncated {
                    expected: expected as usize,
                    found: found as usize,
                };
                return self.violation(conn, remote, e);
            }
            Err(ReceiveError::Overrun { expected, .. }) => {
                return self.violation(conn, remote, FrameError::TrailingBytes { expected });
            }
        };
        self.send_header(send, request, kind, &[]).await;
    }

    /// A probe's answer: `Held` with the stored length, `NotFound` or `Unavailable`.
    async fn answer_probe(&self, send: &mut SendStream, request: &FrameHeader, held: Holding) {
        self.counters.probes_served();
        match held {
            Holding::Held(len) => {
                let body = len.to_le_bytes();
                self.send_header(send, request, FrameKind::Held, &body)
                    .await
            }
            Holding::NotFound => {
                self.send_header(send, request, FrameKind::NotFound, &[])
                    .await
            }
            Holding::Unavailable => {
                self.send_header(send, request, FrameKind::Unavailable, &[])
                    .await
            }
        }
    }

    /// Sends a header of `kind` about `request`'s block, then `body`, and ends the stream.
    async fn send_header(
        &self,
        send: &mut SendStream,
        request: &FrameHeader,
        kind: FrameKind,
        body: &[u8],
    ) {
        let header = FrameHeader {
            kind,
            length: body.len() as u64,
            ..*request
        };
        if send.write_all(&header.encode()).await.is_ok() && send.write_all(body).await.is_ok() {
            send.finish().ok();
            self.counters
                .add_bytes_out((FRAME_HEADER_LEN + body.len()) as u64);
        }
    }

    /// A peer broke the protocol: count it, close its connection.
    fn violation(&self, conn: &Connection, remote: SocketAddr, e: FrameError) {
        self.counters.protocol_violations();
        tracing::warn!(%remote, error = %e, "protocol violation; closing the connection");
        conn.close(errors::CLOSE_PROTOCOL_VIOLATION, e.to_string().as_bytes());
    }

    /// One message stream of channel `i`: read the request (bounded), hand it to the
    /// channel's handler (bounded), send its answer; a broken request or a handler that does
    /// not answer resets the stream.
    async fn message(
        self: Arc<Self>,
        i: usize,
        remote: SocketAddr,
        mut send: SendStream,
        mut recv: RecvStream,
    ) {
        let channel = self.channels[i];
        let handler = self.handlers.read().unwrap_or_else(|p| p.into_inner())[i].clone();
        let Some(handler) = handler else {
            send.reset(errors::CLOSE_SHUTDOWN).ok();
            return;
        };
        let read = async {
            let mut len = [0u8; MESSAGE_LEN_BYTES];
            recv.read_exact(&mut len).await.ok()?;
            let len = u32::from_le_bytes(len);
            if len > channel.message_bytes_max {
                return None;
            }
            let mut body = vec![0u8; len as usize];
            recv.read_exact(&mut body).await.ok()?;
            Some(body)
        };
        let request = match tokio::time::timeout(self.config.request_timeout(), read).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                self.counters.protocol_violations();
                tracing::debug!(%remote, channel = %channel.name(), "a broken message; resetting");
                send.reset(errors::CLOSE_PROTOCOL_VIOLATION).ok();
                return;
            }
            Err(_) => {
                self.counters.timeouts();
                send.reset(errors::CLOSE_PROTOCOL_VIOLATION).ok();
                return;
            }
        };
        let limit = std::time::Duration::from_millis(channel.handle_timeout_ms);
        let answer = match tokio::time::timeout(limit, handler.handle(request)).await {
            Ok(Some(a)) if a.len() <= channel.message_bytes_max as usize => a,
            Ok(_) => {
                send.reset(errors::CLOSE_SHUTDOWN).ok();
                return;
            }
            Err(_) => {
                self.counters.timeouts();
                send.reset(errors::CLOSE_SHUTDOWN).ok();
                return;
            }
        };
        let len = (answer.len() as u32).to_le_bytes();
        if send.write_all(&len).await.is_ok() && send.write_all(&answer).await.is_ok() {
            send.finish().ok();
            self.counters.messages_served();
        }
    }
}
