//! [`TransportError`]: the one error type at this crate's boundary.
//!
//! Every variant says what was expected and what was found, and names the peer when there is
//! one. Variants are grouped by who is at fault: our config, the peer's bytes, the network, the
//! local fabric (UCX, RDMA), or the local files the certificates live in.
//!
//! `bounded` is the one way a transport bounds a wait on a peer: a timeout is counted and
//! typed like any other failure.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use kvfabric_store::BlockId;

use crate::counters::TransportCounters;
use crate::frame::FrameError;
use crate::peer::PeerAddr;

/// Everything moving a block can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A config field out of range, or two fields that contradict each other.
    #[error("transport config: `{field}`: {reason}")]
    Config {
        /// The offending field (dotted for nested sections).
        field: &'static str,
        /// Expected versus found.
        reason: String,
    },
    /// The peer sent a frame header that failed to decode or check; the connection is closed.
    #[error("protocol violation by {peer}: {error}")]
    Protocol {
        /// Who sent it.
        peer: PeerAddr,
        /// What was wrong with it (boxed: keeps every `Result` small).
        error: Box<FrameError>,
    },
    /// The peer does not hold the block.
    #[error("{peer} does not hold block {id}")]
    NotFound {
        /// Who was asked.
        peer: PeerAddr,
        /// The block.
        id: BlockId,
    },
    /// The peer holds the block but could not serve it (its own read failed or its limits).
    #[error("{peer} could not serve block {id}")]
    Unavailable {
        /// Who was asked.
        peer: PeerAddr,
        /// The block.
        id: BlockId,
    },
    /// The peer refused a pushed block: its bytes hashed to another id on the peer's side.
    #[error("{peer} rejected block {id}: the bytes it received hash to another id")]
    Rejected {
        /// Who refused it.
        peer: PeerAddr,
        /// The block.
        id: BlockId,
    },
    /// A channel message that broke the channel's framing (too large, cut short).
    #[error("message with {peer}: {reason}")]
    BadMessage {
        /// The peer.
        peer: PeerAddr,
        /// The channel, what was expected and what was found.
        reason: String,
    },
    /// A channel this transport does not carry.
    #[error("no channel {channel} on this transport (it carries: {carried})")]
    NoChannel {
        /// The channel asked for.
        channel: String,
        /// The channels it carries.
        carried: String,
    },
    /// The bytes the peer sent hash to another id; they were dropped and counted.
    #[error("block {expected} from {peer} failed verification: bytes hash to {found}")]
    VerifyFailed {
        /// Who sent them.
        peer: PeerAddr,
        /// The id asked for.
        expected: BlockId,
        /// What the bytes hash to.
        found: BlockId,
    },
    /// The block's stream ended before the announced length (nothing was installed).
    #[error("block {id} from {peer} truncated: expected {expected} bytes, found {found}")]
    Truncated {
        /// Who sent it.
        peer: PeerAddr,
        /// The block.
        id: BlockId,
        /// Announced length.
        expected: u64,
        /// Bytes that came.
        found: u64,
    },
    /// The peer sent more bytes than it announced; the connection is closed.
    #[error("block {id} from {peer} overran: expected {expected} bytes, found at least {found}")]
    Overrun {
        /// Who sent it.
        peer: PeerAddr,
        /// The block.
        id: BlockId,
        /// Announced length.
        expected: u64,
        /// Bytes offered.
        found: u64,
    },
    /// A bounded wait ran out.
    #[error("{what} with {peer}: timed out after {after_ms} ms")]
    Timeout {
        /// The peer.
        peer: PeerAddr,
        /// What was being waited for (`"connect"`, `"fetch"`).
        what: &'static str,
        /// The bound (`connect_timeout_ms`, `fetch_timeout_ms`).
        after_ms: u64,
    },
    /// No connection could be started (bad address, local endpoint closed).
    #[error("cannot connect to {peer}: {reason}")]
    Connect {
        /// The peer.
        peer: PeerAddr,
        /// Why.
        reason: String,
    },
    /// TLS refused the other side: a certificate not signed by the cluster CA, a wrong name.
    #[error("handshake with {peer} refused: {reason}")]
    Handshake {
        /// The peer.
        peer: PeerAddr,
        /// The TLS alert or local verifier error.
        reason: String,
    },
    /// The connection or stream was lost mid-fetch (peer died, reset, idle timeout).
    #[error("connection to {peer} lost: {reason}")]
    ConnectionLost {
        /// The peer.
        peer: PeerAddr,
        /// What the QUIC stack reported.
        reason: String,
    },
    /// A fetch was asked of an empty owner list.
    #[error("block {id}: expected at least one owner, found none")]
    NoOwners {
        /// The block.
        id: BlockId,
    },
    /// Every owner was tried and each failed; the failures in the order tried.
    #[error("block {id}: all {} owners failed; last: {}", failures.len(), failures.last().map(|f| f.to_string()).unwrap_or_default())]
    AllOwnersFailed {
        /// The block.
        id: BlockId,
        /// One error per owner tried, in order.
        failures: Vec<TransportError>,
    },
    /// This transport was closed.
    #[error("transport closed")]
    Closed,
    /// The fabric a transport needs is not present on this machine (no RDMA device, no UCX
    /// transport that can run); `reason` names what is missing. Returned at construction,
    /// never after: a transport that exists can move bytes.
    #[error("{fabric} unavailable: {reason}")]
    FabricUnavailable {
        /// `"UCX"` or `"RDMA"`.
        fabric: &'static str,
        /// What is missing, and how that was found out.
        reason: String,
    },
    /// A local call into the fabric library failed (not the peer's doing).
    #[error("{fabric}: `{call}` failed: {reason}")]
    Fabric {
        /// `"UCX"` or `"RDMA"`.
        fabric: &'static str,
        /// The library function.
        call: &'static str,
        /// The library's status, as text.
        reason: String,
    },
    /// Certificate or key material that cannot be generated, parsed or used.
    #[error("certificates: {path}: {reason}")]
    Certs {
        /// The file (or `<memory>`).
        path: PathBuf,
        /// Expected versus found.
        reason: String,
    },
    /// A local I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What the transport was doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl TransportError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> TransportError {
        TransportError::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether the bytes failed their hash (a lying or corrupted peer).
    pub fn is_verify_failure(&self) -> bool {
        matches!(self, TransportError::VerifyFailed { .. })
    }

    /// Whether the peer did not answer at all — unreachable, silent past a bound, its
    /// connection lost or refused, its stream broken — as opposed to answering (not found,
    /// unavailable, rejected) or failing verification. A caller suspects such a peer.
    pub fn is_peer_unreachable(&self) -> bool {
        matches!(
            self,
            TransportError::Timeout { .. }
                | TransportError::Connect { .. }
                | TransportError::ConnectionLost { .. }
                | TransportError::Handshake { .. }
                | TransportError::Truncated { .. }
        )
    }
}

/// `work`, bounded by `limit`. Past it the timeout is counted and typed as `what`, with the peer
/// and the bound in milliseconds. Every wait on a peer, in every transport, is bounded this way.
pub(crate) async fn bounded<T>(
    limit: Duration,
    counters: &TransportCounters,
    peer: &PeerAddr,
    what: &'static str,
    work: impl Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        counters.timeouts();
        Err(TransportError::Timeout {
            peer: peer.clone(),
            what,
            after_ms: limit.as_millis() as u64,
        })
    })
}
