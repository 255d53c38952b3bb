//! The commands replicated through the Raft log, and what applying each one answers.
//!
//! A command is applied by every replica in log order, so everything it depends on is inside
//! it: lease deadlines and expiry times are carried as numbers, never read from a local clock
//! during apply. A rejected command (stale epoch, expired lease) is still a committed entry; its
//! [`CommandReply::Rejected`] is the same on every replica.

use kvfabric_store::{BlockId, Tier};
use serde::{Deserialize, Serialize};

use crate::ids::{ChunkKey, Epoch, NodeId};

/// Identifies one proposal so that a retry after an unknown outcome applies at most once:
/// `client` is drawn at random by each directory handle when it opens, `seq` counts up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId {
    /// The proposing handle (random per open).
    pub client: u64,
    /// Its proposal counter, from 1.
    pub seq: u64,
}

/// The payload of one Raft log entry: a command and the id that deduplicates it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Who proposed it.
    pub id: RequestId,
    /// What to apply.
    pub command: Command,
}

/// A write to the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A node starts: the directory assigns it the next epoch, marks it live until `until_ms`
    /// and drops every record of its older incarnations (whose memory tiers died with them).
    Join {
        /// The starting node.
        node: NodeId,
        /// End of its first lease.
        until_ms: u64,
    },
    /// A node extends its lease.
    RenewLease {
        /// The node.
        node: NodeId,
        /// Its current epoch (an older one is rejected).
        epoch: Epoch,
        /// New end of the lease.
        until_ms: u64,
    },
    /// One node's ownership changes, applied atomically (what the batcher emits).
    Ownership(OwnershipBatch),
    /// Proposed by the leader from its clock: every live node whose lease ended at or before
    /// `now_ms` is marked expired and all of its owner records are purged, in this one entry;
    /// dormant blocks past their deadline lose their chunk mappings.
    ExpireLeases {
        /// The leader's clock when it proposed.
        now_ms: u64,
        /// How long the chunk mappings of blocks left without owners stay, dormant, for a
        /// holder that returns (joins again and re-registers) — the leader's `lease_ms`.
        keep_chunks_ms: u64,
    },
    /// Requests the leader received together (ownership batches of several nodes), merged
    /// into one entry: each applies in order, with its own deduplication, as if it had an
    /// entry of its own. Never nested.
    Merged(Vec<Request>),
}

impl Command {
    /// Directory records the command writes: a batch's records, else one.
    pub fn record_count(&self) -> u64 {
        match self {
            Command::Ownership(b) => b.len() as u64,
            Command::Merged(requests) => requests.iter().map(|r| r.command.record_count()).sum(),
            _ => 1,
        }
    }
}

/// Ownership changes of one node incarnation. Claims apply first, then releases (a block
/// moving between tiers keeps an owner throughout), then chunk mappings; a batch built by the batcher never names one `(block, tier)` twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipBatch {
    /// The node making the changes.
    pub node: NodeId,
    /// Its current epoch.
    pub epoch: Epoch,
    /// Blocks it now holds, and where.
    pub claims: Vec<(BlockId, Tier)>,
    /// Blocks it no longer holds in that tier.
    pub releases: Vec<(BlockId, Tier)>,
    /// Chunk keys that name a block (prefix-chained or position-independent alike).
    pub chunks: Vec<(ChunkKey, BlockId)>,
}

impl OwnershipBatch {
    /// A batch of claims (and chunk mappings) only.
    pub fn claim(
        node: NodeId,
        epoch: Epoch,
        claims: Vec<(BlockId, Tier)>,
        chunks: Vec<(ChunkKey, BlockId)>,
    ) -> OwnershipBatch {
        OwnershipBatch {
            node,
            epoch,
            claims,
            releases: Vec::new(),
            chunks,
        }
    }

    /// A batch of releases only.
    pub fn release(node: NodeId, epoch: Epoch, releases: Vec<(BlockId, Tier)>) -> OwnershipBatch {
        OwnershipBatch {
            node,
            epoch,
            claims: Vec::new(),
            releases,
            chunks: Vec::new(),
        }
    }

    /// Claims + releases + chunk mappings: what the batch size bound counts.
    pub fn len(&self) -> usize {
        self.claims.len() + self.releases.len() + self.chunks.len()
    }

    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What applying a command answered; identical on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandReply {
    /// A membership or blank entry (no command).
    Empty,
    /// The node joined with this epoch.
    Joined {
        /// The new incarnation.
        epoch: Epoch,
        /// Records of older incarnations that were dropped.
        records_dropped: u64,
    },
    /// The lease now runs until `until_ms`.
    LeaseRenewed {
        /// New end of the lease.
        until_ms: u64,
    },
    /// An ownership batch was applied.
    Applied {
        /// Owner records added or refreshed.
        claimed: u64,
        /// Owner records removed.
        released: u64,
        /// Chunk mappings set.
        chunks: u64,
    },
    /// Leases expired and their records were purged.
    Expired {
        /// One line per node that expired in this entry.
        nodes: Vec<ExpiredNode>,
    },
    /// The command was refused; the state did not change.
    Rejected(Rejection),
    /// The replies to a [`Command::Merged`] entry's requests, in order.
    Merged(Vec<CommandReply>),
}

/// A node whose lease ran out, and what was purged with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiredNode {
    /// The node.
    pub node: NodeId,
    /// The incarnation that expired.
    pub epoch: Epoch,
    /// Owner records purged.
    pub records_purged: u64,
    /// Chunk mappings dropped because their block lost its last owner.
    pub chunks_dropped: u64,
}

/// Why a command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// A [`Command::Merged`] inside a merged entry (the leader never builds one).
    NestedMerge,
    /// The node never joined.
    UnknownNode {
        /// The node named by the command.
        node: NodeId,
    },
    /// The command carries an epoch older than the node's current one: it comes from an
    /// incarnation that has since restarted.
    StaleEpoch {
        /// The node.
        node: NodeId,
        /// Its current epoch.
        expected: Epoch,
        /// The epoch in the command.
        found: Epoch,
    },
    /// The command carries an epoch the directory never assigned.
    FutureEpoch {
        /// The node.
        node: NodeId,
        /// Its current epoch.
        expected: Epoch,
        /// The epoch in the command.
        found: Epoch,
    },
    /// A retried request that is older than the deduplication window remembers: it may
    /// already have been applied, so it is not applied again.
    RequestExpired {
        /// The request.
        id: RequestId,
        /// Every request of that client at or below this sequence number is forgotten.
        floor: u64,
    },
    /// The node's lease expired; it must join again.
    LeaseExpired {
        /// The node.
        node: NodeId,
        /// When its lease ended.
        lease_until_ms: u64,
    },
}
