//! The client's exchanges besides fetches: pushing a block, probing for one, and channel
//! messages. Each is one bidirectional stream on the pooled connection for its channel,
//! bounded in time, counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use quinn::{Connection, ReadExactError};

use super::client::{ChannelIndex, Client, BLOCKS};
use super::errors;
use crate::error::{bounded, TransportError};
use crate::frame::{
    decode_response, push_header, FrameError, FrameHeader, FrameKind, FRAME_HEADER_LEN, HELD_LENGTH,
};
use crate::message::{Channel, MESSAGE_LEN_BYTES};
use crate::peer::PeerAddr;

/// The sending half of a push's stream, reset if the push is dropped before its answer (a
/// caller that timed out or moved on). quinn finishes a dropped stream instead, so an
/// abandoned push would go on (re)transmitting its block ahead of every later exchange on
/// the connection (streams are sent one after another, `send_fairness` off) and land as a
/// copy nobody counted. Channel messages are left to quinn: a Raft message late past its
/// caller's bound still brings its follower the entries, and a failed message already makes
/// the next one dial afresh ([`Client::forget`]).
struct Sending(Option<quinn::SendStream>);

impl Sending {
    fn stream(&mut self) -> &mut quinn::SendStream {
        self.0.as_mut().expect("held until answered")
    }

    /// The answer came: the peer had every byte; nothing to reset.
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            // Fails only if the stream is already closed: nothing left to stop.
            s.reset(errors::STREAM_ABANDONED).ok();
        }
    }
}

impl Client {
    /// Pushes `block` to `peer` and waits for its answer, bounded by `fetch_timeout_ms`.
    pub(crate) async fn push(
        &self,
        peer: &PeerAddr,
        block: &VerifiedBlock,
    ) -> Result<(), TransportError> {
        let attempt = async {
            let _permit = self
                .fetch_slots
                .acquire()
                .await
                .map_err(|_| TransportError::Closed)?;
            let conn = self.connection(peer, BLOCKS).await?;
            self.push_on(&conn, peer, block).await
        };
        let limit = self.config.fetch_timeout();
        let r = bounded(limit, &self.counters, peer, "push", attempt).await;
        match &r {
            Ok(()) => self.counters.pushes_ok(),
            Err(_) => self.counters.pushes_failed(),
        }
        r
    }

    /// Asks `peer` whether it holds `id`: its stored length, or why not.
    pub(crate) async fn probe(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> Result<u64, TransportError> {
        let attempt = async {
            let conn = self.connection(peer, BLOCKS).await?;
            self.probe_on(&conn, peer, namespace, id).await
        };
        let limit = self.config.fetch_timeout();
        let r = bounded(limit, &self.counters, peer, "probe", attempt).await;
        match &r {
            Ok(_) | Err(TransportError::NotFound { .. } | TransportError::Unavailable { .. }) => {
                self.counters.probes_ok()
            }
            Err(_) => self.counters.probes_failed(),
        }
        r
    }

    /// Sends one message on `channel` (index `index`) to `peer`, within `limit`.
    pub(crate) async fn call(
        &self,
        channel: &Channel,
        index: ChannelIndex,
        peer: &PeerAddr,
        request: Vec<u8>,
        limit: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        channel.check_len(peer, request.len())?;
        // The connection the call used (its stable id + 1; 0 before it has one).
        let used = AtomicUsize::new(0);
        let attempt = async {
            let conn = self.connection(peer, index).await?;
            used.store(conn.stable_id().wrapping_add(1), Ordering::Relaxed);
            let (mut send, mut recv) = conn
                .open_bi()
                .await
                .map_err(|e| errors::connection(peer, e))?;
            let len = (request.len() as u32).to_le_bytes();
            send.write_all(&len)
                .await
                .map_err(|e| errors::write(peer, e))?;
            send.write_all(&request)
                .await
                .map_err(|e| errors::write(peer, e))?;
            send.finish().ok();
            let mut len = [0u8; MESSAGE_LEN_BYTES];
            recv.read_exact(&mut len)
                .await
                .map_err(|e| errors::read_exact(peer, e))?;
            let len = u32::from_le_bytes(len) as usize;
            channel.check_len(peer, len)?;
            let mut body = vec![0u8; len];
            recv.read_exact(&mut body)
                .await
                .map_err(|e| errors::read_exact(peer, e))?;
            Ok(body)
        };
        let r = bounded(limit, &self.counters, peer, "message", attempt).await;
        match &r {
            Ok(_) => self.counters.messages_ok(),
            Err(_) => {
                self.counters.messages_failed();
                // The connection's state is unknown (a dead peer looks like a slow one): the
                // next message dials again.
                let used = used.load(Ordering::Relaxed).checked_sub(1);
                self.forget(peer, index, used);
            }
        }
        r
    }

    /// Reads and checks the answer header to `request` on `recv`.
    pub(super) async fn answer(
        &self,
        conn: &Connection,
        peer: &PeerAddr,
        recv: &mut quinn::RecvStream,
        request: &FrameHeader,
    ) -> Result<FrameHeader, TransportError> {
        let mut head = [0u8; FRAME_HEADER_LEN];
        match recv.read_exact(&mut head).await {
            Ok(()) => {}
            Err(ReadExactError::FinishedEarly(found)) => {
                let error = FrameError::Truncated {
                    expected: FRAME_HEADER_LEN,
                    found,
                };
                return Err(self.violation(conn, peer, error));
            }
            Err(e) => return Err(errors::read_exact(peer, e)),
        }
        self.counters.add_bytes_in(FRAME_HEADER_LEN as u64);
        self.heard(peer);
        decode_response(&head, request, self.config.max_frame_bytes)
            .map_err(|e| self.violation(conn, peer, e))
    }

    async fn push_on(
        &self,
        conn: &Connection,
        peer: &PeerAddr,
        block: &VerifiedBlock,
    ) -> Result<(), TransportError> {
        let (send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|e| errors::connection(peer, e))?;
        let mut send = Sending(Some(send));
        let bytes = block.bytes();
        let request = push_header(block.namespace(), block.id(), bytes.len() as u64);
        send.stream()
            .write_all(&request.encode())
            .await
            .map_err(|e| errors::write(peer, e))?;
        send.stream()
            .write_all(bytes)
            .await
            .map_err(|e| errors::write(peer, e))?;
        send.stream().finish().ok();
        self.counters
            .add_bytes_out((FRAME_HEADER_LEN + bytes.len()) as u64);
        let answer = self.answer(conn, peer, &mut recv, &request).await?;
        send.answered();
        let (peer, id) = (peer.clone(), block.id());
        match answer.kind {
            FrameKind::Stored => Ok(()),
            FrameKind::Rejected => Err(TransportError::Rejected { peer, id }),
            // decode_response lets only Stored, Rejected and Unavailable answer a Push.
            _ => Err(TransportError::Unavailable { peer, id }),
        }
    }

    async fn probe_on(
        &self,
        conn: &Connection,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> Result<u64, TransportError> {
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|e| errors::connection(peer, e))?;
        let request = FrameHeader::request(FrameKind::Probe, namespace, id);
        send.write_all(&request.encode())
            .await
            .map_err(|e| errors::write(peer, e))?;
        send.finish().ok();
        let answer = self.answer(conn, peer, &mut recv, &request).await?;
        let peer = peer.clone();
        match answer.kind {
            FrameKind::Held => {
                let mut len = [0u8; HELD_LENGTH as usize];
                recv.read_exact(&mut len)
                    .await
                    .map_err(|e| errors::read_exact(&peer, e))?;
                Ok(u64::from_le_bytes(len))
            }
            FrameKind::NotFound => Err(TransportError::NotFound { peer, id }),
            // decode_response lets only Held, NotFound and Unavailable answer a Probe.
            _ => Err(TransportError::Unavailable { peer, id }),
        }
    }
}
