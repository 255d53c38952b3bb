//! The state machine of one directory shard, as plain data: no Raft, no disk, no clock.
//!
//! Holds `BlockId → owners`, `ChunkKey → BlockId` and the node table (epochs and leases), and
//! applies [`Command`]s to them deterministically. Invariants, checked by
//! [`ShardState::check_invariants`] in tests:
//! - every owner record of a block appears in the per-node index, and nothing else does;
//! - every owner record carries its node's current epoch, and that node is live;
//! - a block with no owner is absent, and every chunk key names a block that is present or
//!   dormant (never both);
//! - the session table keeps its bounds ([`crate::sessions`]).
//!
//! A snapshot that breaks any of them is refused as corrupt when decoded.
//!
//! Dormant blocks: a node's join purges its records of the previous incarnation, and an
//! expired lease purges a paused or partitioned node's records; the node then (joins again
//! and) registers what it holds, by block id alone (a store does not persist chunk keys). A
//! block whose last owner was that node keeps its chunk mappings, dormant — until the join's
//! lease deadline, or for `keep_chunks_ms` after the expiry: a claim before then revives it
//! with its chunk keys, so a restart (even of every member at once) or a long pause loses no
//! chunk mapping of a block that comes back. A dormant block's chunk keys still resolve to it
//! (it has no owners, so readers treat it as a miss);
//! `ExpireLeases` drops the chunk mappings of those still unclaimed at their deadline.

use std::collections::{BTreeMap, HashMap, HashSet};

use kvfabric_store::{BlockId, Tier};
use serde::{Deserialize, Serialize};

use crate::command::{Command, CommandReply, ExpiredNode, OwnershipBatch, Rejection, Request};
use crate::error::DirectoryError;
use crate::ids::{ChunkKey, Epoch, NodeId, ShardId};
use crate::owner::{Liveness, NodeRecord, Owner};
use crate::sessions::Sessions;
use crate::sorted_set::SortedSet;

/// One shard's directory state. Serialized whole into snapshots; the two indexes are rebuilt
/// from the primary maps on load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardState {
    shard: ShardId,
    /// Hashed, written in key order ([`crate::ordered_map`]): a claim looks its block up
    /// several times, and an ordered map of 32-byte keys cost a tree search each time.
    #[serde(with = "crate::ordered_map")]
    blocks: HashMap<BlockId, SortedSet<Owner>>,
    #[serde(with = "crate::ordered_map")]
    chunks: HashMap<ChunkKey, BlockId>,
    nodes: BTreeMap<NodeId, NodeRecord>,
    sessions: Sessions,
    /// Blocks without owners whose chunk mappings are kept until the deadline (ms).
    dormant: BTreeMap<BlockId, u64>,
    /// Hashed, not ordered: nothing reads them in order, and an ordered index of 32-byte
    /// keys cost a tree search per record applied.
    #[serde(skip)]
    by_node: HashMap<NodeId, HashSet<(BlockId, Tier)>>,
    #[serde(skip)]
    chunks_of: HashMap<BlockId, SortedSet<ChunkKey>>,
}

impl ShardState {
    /// An empty shard.
    pub fn new(shard: ShardId) -> ShardState {
        ShardState {
            shard,
            ..ShardState::default()
        }
    }

    /// The shard this state belongs to.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Rebuilds the indexes after deserialization.
    pub(crate) fn rebuild_indexes(&mut self) {
        self.by_node.clear();
        self.chunks_of.clear();
        for (block, owners) in &self.blocks {
            for o in owners {
                self.by_node
                    .entry(o.node)
                    .or_default()
                    .insert((*block, o.tier));
            }
        }
        for (chunk, block) in &self.chunks {
            self.chunks_of.entry(*block).or_default().insert(*chunk);
        }
    }

    /// The holders of `block`, sorted by node then tier.
    pub fn owners(&self, block: &BlockId) -> Vec<Owner> {
        self.blocks
            .get(block)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The block a chunk key names, if any: a held block, or a dormant one (then it has no
    /// owners until a holder registers it again).
    pub fn resolve(&self, chunk: &ChunkKey) -> Option<BlockId> {
        self.chunks.get(chunk).copied()
    }

    /// Number of dormant blocks (no owner, chunk mappings kept for a returning holder).
    pub fn dormant_count(&self) -> usize {
        self.dormant.len()
    }

    /// The directory's record of `node`.
    pub fn node(&self, node: NodeId) -> Option<NodeRecord> {
        self.nodes.get(&node).copied()
    }

    /// Every known node.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, NodeRecord)> + '_ {
        self.nodes.iter().map(|(n, r)| (*n, *r))
    }

    /// Number of blocks with at least one owner.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Number of chunk mappings.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Number of owner records of `node`.
    pub fn records_of(&self, node: NodeId) -> usize {
        self.by_node.get(&node).map_or(0, HashSet::len)
    }

    /// Live nodes whose lease ended at or before `now_ms`: what `ExpireLeases { now_ms }`
    /// would purge. The leader checks this before proposing, so idle ticks write nothing.
    pub fn expired_at(&self, now_ms: u64) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, r)| r.liveness == Liveness::Live && r.lease_until_ms <= now_ms)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Whether `ExpireLeases { now_ms }` would change anything: a lease to expire or a
    /// dormant block past its deadline.
    pub fn expiry_due(&self, now_ms: u64) -> bool {
        !self.expired_at(now_ms).is_empty() || self.dormant.values().any(|d| *d <= now_ms)
    }

    /// Planted bug (chaos harness only): records a reply for a client no request comes from,
    /// so this state's bytes differ from every other replica's.
    #[cfg(feature = "planted-bug-diverging-replica")]
    pub(crate) fn plant_phantom_reply(&mut self, log_index: u64) {
        let id = crate::command::RequestId {
            client: u64::MAX,
            seq: log_index,
        };
        self.sessions.record(id, CommandReply::Empty, log_index);
    }

    /// Applies one logged request at `log_index`, once: a retry of a request already applied
    /// gets the reply recorded the first time.
    pub fn apply_request(&mut self, request: &Request, log_index: u64) -> CommandReply {
        if let Command::Merged(requests) = &request.command {
            // Each request keeps its own id: a retry that lands in a later entry, merged or
            // not, is answered from the session table.
            return CommandReply::Merged(
                requests
                    .iter()
                    .map(|r| match r.command {
                        Command::Merged(_) => CommandReply::Rejected(Rejection::NestedMerge),
                        _ => self.apply_request(r, log_index),
                    })
                    .collect(),
            );
        }
        if let Some(reply) = self.sessions.seen(request.id) {
            return reply;
        }
        let reply = self.apply(&request.command);
        self.sessions.record(request.id, reply.clone(), log_index);
        reply
    }

    /// Applies one command. Deterministic: the same state and command give the same result on
    /// every replica.
    pub fn apply(&mut self, command: &Command) -> CommandReply {
        match command {
            Command::Join { node, until_ms } => self.join(*node, *until_ms),
            Command::RenewLease {
                node,
                epoch,
                until_ms,
            } => match self.check_live(*node, *epoch) {
                Err(r) => CommandReply::Rejected(r),
                Ok(()) => {
                    let rec = self.nodes.get_mut(node).expect("checked live");
                    // A lease never shrinks: a delayed renewal must not cut a newer one short.
                    rec.lease_until_ms = rec.lease_until_ms.max(*until_ms);
                    CommandReply::LeaseRenewed {
                        until_ms: rec.lease_until_ms,
                    }
                }
            },
            Command::Ownership(batch) => self.ownership(batch),
            Command::ExpireLeases {
                now_ms,
                keep_chunks_ms,
            } => self.expire(*now_ms, *keep_chunks_ms),
            // Merged entries apply through `apply_request`, request by request.
            Command::Merged(_) => CommandReply::Rejected(Rejection::NestedMerge),
        }
    }

    fn join(&mut self, node: NodeId, until_ms: u64) -> CommandReply {
        let epoch = self.nodes.get(&node).map_or(Epoch(1), |r| r.epoch.next());
        let (records_dropped, _) = self.purge_node(node, Some(until_ms));
        self.nodes.insert(
            node,
            NodeRecord {
                epoch,
                lease_until_ms: until_ms,
                liveness: Liveness::Live,
            },
        );
        CommandReply::Joined {
            epoch,
            records_dropped,
        }
    }

    fn check_live(&self, node: NodeId, epoch: Epoch) -> Result<(), Rejection> {
        let rec = self
            .nodes
            .get(&node)
            .ok_or(Rejection::UnknownNode { node })?;
        if epoch < rec.epoch {
            return Err(Rejection::StaleEpoch {
                node,
                expected: rec.epoch,
                found: epoch,
            });
        }
        if epoch > rec.epoch {
            return Err(Rejection::FutureEpoch {
                node,
                expected: rec.epoch,
                found: epoch,
            });
        }
        if rec.liveness == Liveness::Expired {
            return Err(Rejection::LeaseExpired {
                node,
                lease_until_ms: rec.lease_until_ms,
            });
        }
        Ok(())
    }

    fn ownership(&mut self, batch: &OwnershipBatch) -> CommandReply {
        if let Err(r) = self.check_live(batch.node, batch.epoch) {
            return CommandReply::Rejected(r);
        }
        let mut claimed = 0u64;
        for (block, tier) in &batch.claims {
            let owner = Owner {
                node: batch.node,
                tier: *tier,
                epoch: batch.epoch,
            };
            self.dormant.remove(block);
            self.blocks.entry(*block).or_default().insert(owner);
            self.by_node
                .entry(batch.node)
                .or_default()
                .insert((*block, *tier));
            claimed += 1;
        }
        // Releases after claims: a block moving between tiers (claimed in the new, released
        // from the old, in one entry) never loses its last owner on the way, so its chunk
        // mappings are kept. Within one entry no claim and release name the same record.
        let mut released = 0u64;
        for (block, tier) in &batch.releases {
            if self.remove_record(batch.node, *block, *tier) {
                released += 1;
            }
        }
        let mut chunks = 0u64;
        for (chunk, block) in &batch.chunks {
            // A chunk may only name a block someone holds; otherwise it would dangle.
            if !self.blocks.contains_key(block) {
                continue;
            }
            if let Some(old) = self.chunks.insert(*chunk, *block) {
                self.unindex_chunk(old, *chunk);
            }
            self.chunks_of.entry(*block).or_default().insert(*chunk);
            chunks += 1;
        }
        CommandReply::Applied {
            claimed,
            released,
            chunks,
        }
    }

    fn expire(&mut self, now_ms: u64, keep_chunks_ms: u64) -> CommandReply {
        let mut nodes = Vec::new();
        let dormant_until = now_ms.saturating_add(keep_chunks_ms);
        for node in self.expired_at(now_ms) {
            let keep = (keep_chunks_ms > 0).then_some(dormant_until);
            let (records_purged, chunks_dropped) = self.purge_node(node, keep);
            let rec = self.nodes.get_mut(&node).expect("listed by expired_at");
            rec.liveness = Liveness::Expired;
            nodes.push(ExpiredNode {
                node,
                epoch: rec.epoch,
                records_purged,
                chunks_dropped,
            });
        }
        let due: Vec<BlockId> = self
            .dormant
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .map(|(b, _)| *b)
            .collect();
        for block in due {
            self.dormant.remove(&block);
            self.drop_chunks_of(block);
        }
        CommandReply::Expired { nodes }
    }

    /// Removes every owner record of `node`; returns (records removed, chunks dropped).
    /// With `dormant_until`, blocks left without owners keep their chunk mappings, dormant,
    /// until then (a join); without, the mappings go at once (an expiry).
    fn purge_node(&mut self, node: NodeId, dormant_until: Option<u64>) -> (u64, u64) {
        let Some(records) = self.by_node.remove(&node) else {
            return (0, 0);
        };
        let mut chunks_dropped = 0u64;
        let n = records.len() as u64;
        for (block, tier) in records {
            match dormant_until {
                None => chunks_dropped += self.remove_from_block(node, block, tier),
                Some(until) => {
                    if self.remove_owner(node, block, tier) && self.chunks_of.contains_key(&block) {
                        self.dormant.insert(block, until);
                    }
                }
            }
        }
        (n, chunks_dropped)
    }

    /// Removes one record; whether it existed.
    fn remove_record(&mut self, node: NodeId, block: BlockId, tier: Tier) -> bool {
        let Some(set) = self.by_node.get_mut(&node) else {
            return false;
        };
        if !set.remove(&(block, tier)) {
            return false;
        }
        if set.is_empty() {
            self.by_node.remove(&node);
        }
        self.remove_from_block(node, block, tier);
        true
    }

    /// Removes `(node, tier)` from the block's owners, dropping the block and its chunk
    /// mappings when it loses its last owner; returns the chunk mappings dropped.
    fn remove_from_block(&mut self, node: NodeId, block: BlockId, tier: Tier) -> u64 {
        if self.remove_owner(node, block, tier) {
            self.drop_chunks_of(block)
        } else {
            0
        }
    }

    /// Removes `(node, tier)` from the block's owners and the block when it was the last;
    /// whether the block went (its chunk mappings stay, for the caller to decide).
    fn remove_owner(&mut self, node: NodeId, block: BlockId, tier: Tier) -> bool {
        let Some(owners) = self.blocks.get_mut(&block) else {
            return false;
        };
        owners.retain(|o| !(o.node == node && o.tier == tier));
        if !owners.is_empty() {
            return false;
        }
        self.blocks.remove(&block);
        true
    }

    /// Drops every chunk mapping naming `block`; how many.
    fn drop_chunks_of(&mut self, block: BlockId) -> u64 {
        let dropped = self.chunks_of.remove(&block).unwrap_or_default();
        for chunk in &dropped {
            self.chunks.remove(chunk);
        }
        dropped.len() as u64
    }

    fn unindex_chunk(&mut self, block: BlockId, chunk: ChunkKey) {
        if let Some(set) = self.chunks_of.get_mut(&block) {
            set.remove(&chunk);
            if set.is_empty() {
                self.chunks_of.remove(&block);
                // A dormant block is kept only for its chunk mappings.
                self.dormant.remove(&block);
            }
        }
    }

    /// Checks the invariants listed in the module docs; the first violation, as
    /// [`DirectoryError::Corrupt`].
    pub fn check_invariants(&self) -> Result<(), DirectoryError> {
        self.violation().map_or(Ok(()), |reason| {
            Err(DirectoryError::Corrupt {
                what: "shard state",
                reason,
            })
        })
    }

    fn violation(&self) -> Option<String> {
        let mut rebuilt = self.clone();
        rebuilt.rebuild_indexes();
        if rebuilt.by_node != self.by_node {
            return Some("per-node index differs from the owner sets".into());
        }
        if rebuilt.chunks_of != self.chunks_of {
            return Some("per-block chunk index differs from the chunk map".into());
        }
        self.content_violation()
    }

    /// The first invariant the primary maps break (the indexes aside: they are derived), if
    /// any. A decoded snapshot is checked with this once its indexes are rebuilt.
    pub(crate) fn content_violation(&self) -> Option<String> {
        for (block, owners) in &self.blocks {
            if owners.is_empty() {
                return Some(format!("{block:?} has an empty owner set"));
            }
            for o in owners {
                let Some(rec) = self.nodes.get(&o.node) else {
                    return Some(format!("{block:?} owned by unknown {}", o.node));
                };
                if rec.epoch != o.epoch || rec.liveness != Liveness::Live {
                    return Some(format!(
                        "{block:?}: record of {} expected epoch {} live, found {} ({:?})",
                        o.node, rec.epoch, o.epoch, rec.liveness
                    ));
                }
            }
        }
        for (chunk, block) in &self.chunks {
            if !self.blocks.contains_key(block) && !self.dormant.contains_key(block) {
                return Some(format!("{chunk:?} names unowned {block:?}"));
            }
        }
        for block in self.dormant.keys() {
            if self.blocks.contains_key(block) {
                return Some(format!("{block:?} is both owned and dormant"));
            }
            if !self.chunks_of.contains_key(block) {
                return Some(format!("dormant {block:?} has no chunk mapping"));
            }
        }
        self.sessions.violation()
    }
}

#[cfg(test)]
#[path = "shard_tests.rs"]
mod tests;
