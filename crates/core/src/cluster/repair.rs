//! Re-replication: a block whose live copies fell below the replication factor (a holder
//! died and its lease expired, or it restarted with its disk wiped) gets new copies.
//!
//! Every `repair_interval_ms` each node walks the blocks it holds and reads, from its own
//! replica of the directory, the distinct live owners of each. A block is repaired when:
//!
//! - this node is among its registered owners (a block not yet registered is a put in flight);
//! - fewer than `replication` owners are live;
//! - this node is the live owner with the lowest id (exactly one holder acts, no race);
//! - it was already under-replicated in the previous pass (a put's own replication, still in
//!   flight, is never mistaken for a loss).
//!
//! The repairer asks members that do not hold the block, in the block's rendezvous order (the
//! same order a put uses), for the missing copies over the control channel; each fetches the
//! block from the repairer, verifies it, installs it and registers itself before answering
//! ([`Cluster::copy_to_peers`]). At most `repair_blocks_max` blocks are repaired per pass, so
//! repair traffic after a large loss is spread over passes. A node that returns later (disk
//! kept) re-registers its copies, so a block may then have more than `replication` copies;
//! extra copies are not removed (they cost space, never correctness).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kvfabric_store::{BlockId, NamespaceKey};

use super::Cluster;
use crate::ids::NodeId;

/// What re-replication has done on this node.
#[derive(Debug, Default)]
pub(crate) struct RepairCounters {
    /// Passes completed.
    pub(crate) passes: AtomicU64,
    /// Held blocks under-replicated in the last pass.
    pub(crate) under_replicated: AtomicU64,
    /// Copies made by repairs.
    pub(crate) copies_made: AtomicU64,
    /// Copies asked for that no member made.
    pub(crate) copies_missing: AtomicU64,
}

/// One block this node must repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repair {
    /// Its namespace.
    pub(crate) ns: NamespaceKey,
    /// The block.
    pub(crate) id: BlockId,
    /// Copies missing.
    pub(crate) need: usize,
    /// Its live owners (this node included), not to be asked.
    pub(crate) live: Vec<NodeId>,
}

/// One pass's decisions: what to repair now, and what was under-replicated (the suspects of
/// the next pass).
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Blocks to repair now, at most the pass's bound.
    pub(crate) repairs: Vec<Repair>,
    /// Every held block seen under-replicated in this pass.
    pub(crate) under: HashSet<BlockId>,
}

/// Decides a pass: `held` are this node's blocks, `owners(id)` the distinct live owners of a
/// block in this node's directory replica, `suspects` the blocks under-replicated in the
/// previous pass.
pub(crate) fn plan(
    me: NodeId,
    replication: usize,
    held: &[(NamespaceKey, BlockId)],
    mut owners: impl FnMut(&BlockId) -> Vec<NodeId>,
    suspects: &HashSet<BlockId>,
    max: usize,
) -> Plan {
    let mut plan = Plan::default();
    for (ns, id) in held {
        let mut live = owners(id);
        live.sort_unstable();
        live.dedup();
        if !live.contains(&me) || live.len() >= replication {
            continue;
        }
        plan.under.insert(*id);
        let responsible = live.first() == Some(&me);
        if responsible && suspects.contains(id) && plan.repairs.len() < max {
            plan.repairs.push(Repair {
                ns: *ns,
                id: *id,
                need: replication - live.len(),
                live,
            });
        }
    }
    plan
}

/// Runs re-replication passes for the life of the node (aborted at shutdown).
pub(crate) async fn run(cluster: Arc<Cluster>) {
    let Some(interval) = cluster.config.repair_interval else {
        return;
    };
    let replication = cluster.config.replication as usize;
    if replication < 2 {
        return;
    }
    let mut suspects = HashSet::new();
    loop {
        tokio::time::sleep(interval).await;
        if !cluster.incarnation.registered() {
            continue;
        }
        let held = match cluster.local.held_keys() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "re-replication: reading the store");
                continue;
            }
        };
        let p = plan(
            cluster.me,
            replication,
            &held,
            |id| {
                cluster
                    .live_holders(id)
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect()
            },
            &suspects,
            cluster.config.repair_blocks_max,
        );
        let c = &cluster.repair;
        c.under_replicated
            .store(p.under.len() as u64, Ordering::Relaxed);
        for r in &p.repairs {
            let made = cluster.copy_to_peers(r.ns, r.id, r.need, &r.live).await;
            tracing::info!(block = %r.id, need = r.need, made, "re-replicated an under-replicated block");
            c.copies_made.fetch_add(made as u64, Ordering::Relaxed);
            c.copies_missing
                .fetch_add(r.need.saturating_sub(made) as u64, Ordering::Relaxed);
        }
        c.passes.fetch_add(1, Ordering::Relaxed);
        suspects = p.under;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(i: u8) -> BlockId {
        BlockId([i; 32])
    }

    fn ns() -> NamespaceKey {
        NamespaceKey([9; 32])
    }

    #[test]
    fn only_the_lowest_live_holder_repairs_and_only_on_the_second_sighting() {
        let held = vec![(ns(), b(1)), (ns(), b(2)), (ns(), b(3)), (ns(), b(4))];
        let owners = |id: &BlockId| match id.0[0] {
            1 => vec![NodeId(2), NodeId(2)], // only me, twice (two tiers)
            2 => vec![NodeId(1), NodeId(2)], // node 1 is responsible
            3 => vec![NodeId(2), NodeId(3), NodeId(1)], // enough copies
            _ => vec![NodeId(1)],            // not registered by me yet
        };
        let first = plan(NodeId(2), 3, &held, owners, &HashSet::new(), 10);
        assert!(first.repairs.is_empty(), "first sighting waits a pass");
        assert_eq!(first.under, HashSet::from([b(1), b(2)]));
        let second = plan(NodeId(2), 3, &held, owners, &first.under, 10);
        assert_eq!(
            second.repairs,
            vec![Repair {
                ns: ns(),
                id: b(1),
                need: 2,
                live: vec![NodeId(2)],
            }]
        );
    }

    #[test]
    fn a_pass_repairs_at_most_its_bound() {
        let held: Vec<_> = (0..10).map(|i| (ns(), b(i))).collect();
        let suspects: HashSet<_> = held.iter().map(|(_, id)| *id).collect();
        let p = plan(NodeId(1), 2, &held, |_| vec![NodeId(1)], &suspects, 3);
        assert_eq!(p.repairs.len(), 3);
        assert_eq!(
            p.under.len(),
            10,
            "every under-replicated block stays a suspect"
        );
    }
}
