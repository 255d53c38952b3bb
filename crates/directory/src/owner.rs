//! What the directory records about a block holder and about a node's liveness.

use kvfabric_store::Tier;
use serde::{Deserialize, Serialize};

use crate::ids::{Epoch, NodeId};

/// One holder of a block: which node, in which tier, claimed by which incarnation of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owner {
    /// The node that holds the bytes.
    pub node: NodeId,
    /// The tier the bytes sit in on that node.
    pub tier: Tier,
    /// The node incarnation that made the claim.
    pub epoch: Epoch,
}

/// Whether a node's lease is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Liveness {
    /// The lease runs until `lease_until_ms`; the node may claim.
    Live,
    /// The lease ran out and the node's records were purged; it must join again (new epoch).
    Expired,
}

/// The directory's record of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's current incarnation.
    pub epoch: Epoch,
    /// End of the lease, in milliseconds of the proposer's clock (Unix time in production).
    pub lease_until_ms: u64,
    /// Live or expired.
    pub liveness: Liveness,
}
