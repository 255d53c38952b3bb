//! The serving side: accept connections (mTLS, at most `connections_max`), and on each block
//! stream read one request, look the block up, and stream its bytes unchanged.
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
use crate::frame::{decode_request, FrameError, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::quic::errors;
use crate::source::{BlockSource, SourceLookup};

/// Everything the serving side owns.
pub(crate) struct Server {
    pub(crate) config: TransportConfig,
    pub(crate) counters: Arc<TransportCounters>,
    pub(crate) source: Arc<dyn BlockSource>,
    pub(crate) connections: Arc<Semaphore>,
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
        let connecting = match incoming.accept() {
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
        let mut streams = JoinSet::new();
        loop {
            tokio::select! {
                accepted = conn.accept_bi() => match accepted {
                    Ok((send, recv)) => {
                        streams.spawn(self.clone().stream(conn.clone(), remote, send, recv));
                    }
                    Err(_) => break,
                },
                Some(_) = streams.join_next(), if !streams.is_empty() => {}
            }
        }
        self.counters.connections_closed();
    }

    async fn read_request(recv: &mut RecvStream) -> Result<FrameHeader, RequestError> {
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
        let request = decode_request(&head).map_err(RequestError::Violation)?;
        // One-sided reads (`FetchRma`, `Release`) are a UCX mode; over QUIC only `Fetch`.
        if request.kind != FrameKind::Fetch {
            return Err(RequestError::Violation(FrameError::UnexpectedKind {
                expected: "Fetch",
                found: request.kind,
            }));
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
            Self::read_request(&mut recv),
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
            let lookup = tokio::select! {
                l = self.source.lookup(request.namespace, request.id) => l,
                _ = stopped => return,
            };
            self.respond(&mut send, &request, lookup, remote).await;
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
}
