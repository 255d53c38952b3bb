//! Channels: request/response messages between nodes on the transport's endpoint, beside
//! blocks — the node's Raft and control traffic. The transport only moves opaque, bounded
//! messages: what they mean (a Raft RPC, a control request) is the caller's.
//!
//! A [`Channel`] is named by its ALPN (QUIC: one connection per peer and channel, told apart
//! by the ALPN the handshake agreed on, all on the one endpoint) and bounded by
//! `message_bytes_max` each way. One request per bidirectional stream: a 4-byte little-endian
//! length and that many bytes, answered the same way; a length past the bound is refused
//! before the body is read, and the stream reset. A [`MessageHandler`] answers a channel's
//! requests; until one is registered ([`Messenger::serve`]) requests are refused (the caller
//! retries).

use std::sync::Arc;
use std::time::Duration;

use crate::error::TransportError;
use crate::peer::PeerAddr;
use crate::transport::TransportFuture;

/// Bytes of a message's length prefix.
pub const MESSAGE_LEN_BYTES: usize = 4;

/// A message channel: its ALPN and its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Channel {
    /// The ALPN that names it (and the connections that carry it).
    pub alpn: &'static [u8],
    /// Largest message either way.
    pub message_bytes_max: u32,
    /// Longest a handler may take to answer before the stream is reset.
    pub handle_timeout_ms: u64,
}

impl Channel {
    /// The channel's name, for messages.
    pub fn name(&self) -> String {
        String::from_utf8_lossy(self.alpn).into_owned()
    }

    /// Checks a message's length against the bound.
    pub fn check_len(&self, peer: &PeerAddr, len: usize) -> Result<(), TransportError> {
        if len > self.message_bytes_max as usize {
            return Err(TransportError::BadMessage {
                peer: peer.clone(),
                reason: format!(
                    "{}: expected at most {} bytes, found {len}",
                    self.name(),
                    self.message_bytes_max
                ),
            });
        }
        Ok(())
    }
}

/// Answers the requests of one channel.
pub trait MessageHandler: Send + Sync + 'static {
    /// The answer to `request`; `None` resets the stream (the caller sees a lost answer).
    fn handle(&self, request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>>;
}

/// Sends and serves channel messages.
pub trait Messenger: Send + Sync {
    /// Answers `channel`'s requests with `handler` from now on (replaces an earlier one).
    fn serve(
        &self,
        channel: Channel,
        handler: Arc<dyn MessageHandler>,
    ) -> Result<(), TransportError>;

    /// Sends `request` to `peer` on `channel` and waits for its answer, within `limit`.
    fn call<'a>(
        &'a self,
        channel: Channel,
        peer: &'a PeerAddr,
        request: Vec<u8>,
        limit: Duration,
    ) -> TransportFuture<'a, Result<Vec<u8>, TransportError>>;
}

/// The error for a channel a transport was not built with.
pub(crate) fn no_channel(channel: &Channel, carried: &[Channel]) -> TransportError {
    TransportError::NoChannel {
        channel: channel.name(),
        carried: carried
            .iter()
            .map(Channel::name)
            .collect::<Vec<_>>()
            .join(", "),
    }
}
