//! The repair plan of one re-replication pass, as a pure function of what this node holds and
//! what its directory replica says (no I/O, no clock): which under-replicated blocks this node
//! must copy now, and which it saw under-replicated (the suspects of the next pass).
//!
//! A block is repaired when this node is among its registered live owners (a block not yet
//! registered is a put in flight), fewer than `replication` owners are live, this node is the
//! live owner with the lowest id (exactly one holder acts, no race), and it was already
//! under-replicated in the previous pass (a put's own replication, still in flight, is never
//! mistaken for a loss). At most `max` blocks are repaired per pass.

use std::collections::HashSet;

use kvfabric_store::{BlockId, NamespaceKey};

use crate::ids::NodeId;

/// One block this node must repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// Its namespace.
    pub ns: NamespaceKey,
    /// The block.
    pub id: BlockId,
    /// Copies missing.
    pub need: usize,
    /// Its live owners (this node included), not to be asked.
    pub live: Vec<NodeId>,
}

/// One pass's decisions: what to repair now, and what was under-replicated (the suspects of
/// the next pass).
#[derive(Debug, Default)]
pub struct Plan {
    /// Blocks to repair now, at most the pass's bound.
    pub repairs: Vec<Repair>,
    /// Every held block seen under-replicated in this pass.
    pub under: HashSet<BlockId>,
}

/// Decides a pass: `held` are this node's blocks, `owners(ns, id)` the distinct live owners of
/// a block in this node's directory replica, `suspects` the blocks under-replicated in the
/// previous pass.
pub fn plan(
    me: NodeId,
    replication: usize,
    held: &[(NamespaceKey, BlockId)],
    mut owners: impl FnMut(&NamespaceKey, &BlockId) -> Vec<NodeId>,
    suspects: &HashSet<BlockId>,
    max: usize,
) -> Plan {
    let mut plan = Plan::default();
    for (ns, id) in held {
        let mut live = owners(ns, id);
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
        let owners = |_: &NamespaceKey, id: &BlockId| match id.0[0] {
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
        let p = plan(NodeId(1), 2, &held, |_, _| vec![NodeId(1)], &suspects, 3);
        assert_eq!(p.repairs.len(), 3);
        assert_eq!(
            p.under.len(),
            10,
            "every under-replicated block stays a suspect"
        );
    }
}
