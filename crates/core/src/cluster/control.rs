//! The node-to-node control protocol: requests one member makes of another that are neither
//! Raft nor block bytes, one JSON message each way on the control channel
//! ([`super::net::CONTROL_CHANNEL`], at most 64 KiB), authenticated by the cluster's mutual
//! TLS like everything on the node's endpoint. Requests: [`ControlRequest::Usage`], "report
//! your tiers (and the bandwidths you measured into yourself, and your counters)";
//! [`ControlRequest::Describe`], "say who you are and where you are reached";
//! [`ControlRequest::Drain`], "you are leaving: copy what only you hold enough of";
//! [`ControlRequest::Events`], "send your event batches from here" (the cluster feed); and
//! [`ControlRequest::BlockInfo`], "what do your events say of this block"; and
//! [`ControlRequest::Offer`], "the copy I am about to push you was put with this engine
//! identity" (`offers`).
//!
//! Replication is not a control request: the putting node pushes each copy over the block
//! transport (`replication`), and so do a repair and a drain.

use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::PeerAddr;
use serde::{Deserialize, Serialize};

/// A control request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlRequest {
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
    /// The copy of `block` about to be pushed to this member was put with `engine` (the
    /// push frame carries none): publish the copy under it.
    Offer {
        /// The namespace it was sealed in.
        namespace: NamespaceKey,
        /// The block.
        block: BlockId,
        /// Its engine identity.
        engine: crate::events::EngineBlock,
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
    /// The offered identity is kept for the push.
    Offered,
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
    /// The peer could not be reached, or the exchange broke.
    #[error("control call to {peer}: {reason}")]
    Unreachable {
        /// The peer.
        peer: PeerAddr,
        /// Why.
        reason: String,
    },
    /// A message did not decode.
    #[error("control message: expected {expected}, found {found}")]
    BadMessage {
        /// What was expected.
        expected: &'static str,
        /// What came.
        found: String,
    },
}

/// Encodes a control message.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    serde_json::to_vec(msg).expect("control messages always serialise")
}

/// Decodes a control message of type `T` (named `expected` in the error).
pub fn decode<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
    expected: &'static str,
) -> Result<T, ControlError> {
    serde_json::from_slice(bytes).map_err(|e| ControlError::BadMessage {
        expected,
        found: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_typed() {
        let back: ControlRequest = decode(&encode(&ControlRequest::Usage), "a request").unwrap();
        assert!(matches!(back, ControlRequest::Usage));
        let resp = ControlResponse::Usage {
            tiers: vec![TierUsageView {
                tier: "host".into(),
                capacity: 10,
                used: 1,
                blocks: 1,
            }],
            inbound: Vec::new(),
            stats: None,
        };
        let back: ControlResponse = decode(&encode(&resp), "a response").unwrap();
        assert!(matches!(back, ControlResponse::Usage { tiers, .. } if tiers.len() == 1));
        let old: ControlResponse = decode(br#"{"usage":{"tiers":[]}}"#, "a response").unwrap();
        assert!(matches!(old, ControlResponse::Usage { inbound, .. } if inbound.is_empty()));
        let e = decode::<ControlRequest>(b"{", "a request").unwrap_err();
        assert!(matches!(e, ControlError::BadMessage { .. }), "{e}");
    }
}
