//! The node-to-node control protocol: requests one member makes of another that are not Raft
//! and not block bytes, carried on the Raft endpoint under their own ALPN
//! ([`CONTROL_ALPN`]) and therefore authenticated by the cluster's mutual TLS.
//!
//! One request per bidirectional stream: a frame of a 4-byte little-endian length and a JSON
//! body of at most [`CONTROL_FRAME_BYTES_MAX`] bytes each way. Requests:
//! [`ControlRequest::Replicate`], "fetch block `block` of `namespace` from member `from` over
//! the block transport, verify, install, register yourself as an owner, then answer", and
//! [`ControlRequest::Usage`], "report your tiers (and the bandwidths you measured, and your
//! counters)"; [`ControlRequest::Describe`], "say who you are and where you are reached";
//! [`ControlRequest::Drain`], "you are leaving: copy what only you hold enough of";
//! [`ControlRequest::Events`], "send your event batches from here" (the cluster feed); and
//! [`ControlRequest::BlockInfo`], "what do your events say of this block".

use kvfabric_store::{BlockId, NamespaceKey};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// ALPN of the control channel on the Raft endpoint.
pub const CONTROL_ALPN: &[u8] = b"kvfabric-ctl/1";
/// Largest control frame body, either way.
pub const CONTROL_FRAME_BYTES_MAX: u32 = 64 * 1024;

/// A control request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlRequest {
    /// Take a verified copy of `block` from member `from`.
    Replicate {
        /// The member holding the block.
        from: u64,
        /// The namespace it was sealed in.
        namespace: NamespaceKey,
        /// The block.
        block: BlockId,
    },
    /// Report this member's tiers.
    Usage,
    /// Send the batches of this member's event log from `since` of `epoch` (its current
    /// epoch from the start when `epoch` is another), from event `first` of the first one
    /// (`events::poll`).
    Events {
        /// The epoch the caller has.
        epoch: u64,
        /// The first sequence number it lacks.
        since: u64,
        /// Events of that batch it already has.
        first: u32,
    },
    /// What this member's events say of `block` (its token count and engine identity), for
    /// a member that takes a copy of it.
    BlockInfo {
        /// The namespace it was sealed in.
        namespace: NamespaceKey,
        /// The block.
        block: BlockId,
    },
    /// Say who you are and where you are reached (a member added at run time, whose
    /// addresses only the Raft membership's entry and the member itself know).
    Describe,
    /// You are leaving: give every block you hold that has fewer than `replication` copies on
    /// other voters the copies it lacks (in the background, started by the first request),
    /// and say how far that is.
    Drain,
}

/// One tier of a member, as `GET /v1/cluster` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierUsageView {
    /// Tier name.
    pub tier: String,
    /// Bytes it may hold.
    pub capacity: u64,
    /// Bytes it holds.
    pub used: u64,
    /// Blocks it holds.
    pub blocks: u64,
}

/// A control response.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlResponse {
    /// The copy is verified, installed and registered; it sits in `tier`.
    Replicated {
        /// Tier name.
        tier: String,
    },
    /// The member's tiers.
    Usage {
        /// Capacity and use per tier.
        tiers: Vec<TierUsageView>,
        /// The bandwidths the member measured on its fetches from others (absent from a
        /// member that predates them).
        #[serde(default)]
        inbound: Vec<crate::cluster::bandwidth::InboundLink>,
        /// The member's counters, for the operator's dashboard (absent from a member that
        /// predates them).
        #[serde(default)]
        stats: Option<crate::cluster::stats::MemberStats>,
    },
    /// This member's description of itself.
    Member {
        /// Its id.
        id: u64,
        /// Its HTTP API.
        api: String,
        /// Its block transport.
        transport: std::net::SocketAddr,
        /// Its Raft endpoint.
        raft: std::net::SocketAddr,
        /// Whether it is ready (joined, caught up with its own join, blocks registered).
        ready: bool,
    },
    /// How the drain stands.
    Drained {
        /// Blocks this member holds.
        held: u64,
        /// Copies made on other voters since the drain started.
        copied: u64,
        /// Held blocks that still have fewer than `replication` copies on other voters.
        remaining: u64,
        /// No drain runs and none remains: the member may leave.
        done: bool,
    },
    /// The batches asked for.
    Events(crate::events::poll::PollReply),
    /// What the events say of the block (none: not held here).
    BlockInfo {
        /// Its info.
        info: Option<crate::events::BlockInfo>,
    },
    /// The request was refused or failed.
    Refused {
        /// A snake_case code.
        code: String,
        /// What happened.
        message: String,
    },
}

/// Why a control exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The peer could not be reached or the stream broke.
    #[error("control call to n{node}: {reason}")]
    Unreachable {
        /// The peer.
        node: u64,
        /// Why.
        reason: String,
    },
    /// A frame was too large or did not decode.
    #[error("control frame: expected {expected}, found {found}")]
    BadFrame {
        /// What was expected.
        expected: String,
        /// What came.
        found: String,
    },
}

fn bad(expected: impl Into<String>, found: impl ToString) -> ControlError {
    ControlError::BadFrame {
        expected: expected.into(),
        found: found.to_string(),
    }
}

/// Writes one frame holding `msg`.
pub async fn write_msg<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> Result<(), ControlError> {
    let body = serde_json::to_vec(msg).map_err(|e| bad("an encodable message", e))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= CONTROL_FRAME_BYTES_MAX)
        .ok_or_else(|| {
            bad(
                format!("at most {CONTROL_FRAME_BYTES_MAX} bytes"),
                body.len(),
            )
        })?;
    w.write_all(&len.to_le_bytes())
        .await
        .map_err(|e| bad("a writable stream", e))?;
    w.write_all(&body)
        .await
        .map_err(|e| bad("a writable stream", e))
}

/// Reads one frame and decodes it; the body is read only after its length passed the bound.
pub async fn read_msg<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> Result<T, ControlError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)
        .await
        .map_err(|e| bad("a 4-byte length", e))?;
    let len = u32::from_le_bytes(len);
    if len > CONTROL_FRAME_BYTES_MAX {
        return Err(bad(format!("at most {CONTROL_FRAME_BYTES_MAX} bytes"), len));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)
        .await
        .map_err(|e| bad(format!("a body of {len} bytes"), e))?;
    serde_json::from_slice(&body).map_err(|e| bad("a control message", e))
}

/// Serves control requests (the node's replication side).
pub trait ControlHandler: Send + Sync + 'static {
    /// Answers one request.
    fn handle(
        &self,
        req: ControlRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ControlResponse> + Send + '_>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused_before_reading() {
        let req = ControlRequest::Replicate {
            from: 3,
            namespace: NamespaceKey::derive("a"),
            block: BlockId([7; 32]),
        };
        let mut buf = Vec::new();
        write_msg(&mut buf, &req).await.unwrap();
        let back: ControlRequest = read_msg(&mut buf.as_slice()).await.unwrap();
        let ControlRequest::Replicate { from, block, .. } = back else {
            panic!("expected a replicate request, found {back:?}");
        };
        assert_eq!((from, block), (3, BlockId([7; 32])));

        let mut huge = (CONTROL_FRAME_BYTES_MAX + 1).to_le_bytes().to_vec();
        huge.extend([0u8; 8]);
        let r: Result<ControlRequest, _> = read_msg(&mut huge.as_slice()).await;
        assert!(matches!(r, Err(ControlError::BadFrame { .. })), "{r:?}");
        let r: Result<ControlRequest, _> = read_msg(&mut &b"\x02\0\0\0{}"[..]).await;
        assert!(matches!(r, Err(ControlError::BadFrame { .. })), "{r:?}");
    }
}
