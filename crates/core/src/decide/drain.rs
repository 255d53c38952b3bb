//! The copies a leaving member must make before it goes, as a pure function of what it holds
//! and what its directory replica says: every held block with fewer than `replication` live
//! copies on voters other than itself gets the difference, asked of voters that do not hold
//! it. The leaving member's own copy never counts (it is about to go), and neither do other
//! learners' (they hold no new copies and may be leaving too).

use kvfabric_store::{BlockId, NamespaceKey};

use crate::ids::NodeId;

/// One block the leaving member must copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainCopy {
    /// Its namespace.
    pub ns: NamespaceKey,
    /// The block.
    pub id: BlockId,
    /// Copies missing on voters.
    pub need: usize,
    /// Its live holders (this member included), not to be asked.
    pub holders: Vec<NodeId>,
}

/// What `me` must copy of `held`: `holders(id)` are a block's distinct live holders in the
/// directory replica, `voters` the Raft voters.
pub fn plan(
    me: NodeId,
    replication: usize,
    held: &[(NamespaceKey, BlockId)],
    voters: &[NodeId],
    mut holders: impl FnMut(&NamespaceKey, &BlockId) -> Vec<NodeId>,
) -> Vec<DrainCopy> {
    let mut out = Vec::new();
    for (ns, id) in held {
        let mut h = holders(ns, id);
        h.sort_unstable();
        h.dedup();
        let on_voters = h.iter().filter(|n| **n != me && voters.contains(n)).count();
        if on_voters < replication {
            if !h.contains(&me) {
                h.push(me);
            }
            out.push(DrainCopy {
                ns: *ns,
                id: *id,
                need: replication - on_voters,
                holders: h,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(i: u8) -> (NamespaceKey, BlockId) {
        (NamespaceKey::derive("a"), BlockId([i; 32]))
    }

    #[test]
    fn only_copies_on_other_voters_count() {
        let me = NodeId(5);
        let voters = [NodeId(1), NodeId(2), NodeId(3)];
        let held = [b(1), b(2), b(3)];
        let p = plan(me, 2, &held, &voters, |_, id| match id.0[0] {
            1 => vec![NodeId(5), NodeId(1), NodeId(2)], // enough elsewhere
            2 => vec![NodeId(5), NodeId(1), NodeId(4)], // n4 is a learner: one short
            _ => vec![NodeId(5)],                       // only here
        });
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].id, p[0].need), (b(2).1, 1));
        assert_eq!(p[0].holders, vec![NodeId(1), NodeId(4), NodeId(5)]);
        assert_eq!((p[1].id, p[1].need), (b(3).1, 2));
    }

    proptest! {
        /// After the planned copies land on voters, every held block has `replication`
        /// copies on voters other than the leaving member, and no block is planned twice.
        #[test]
        fn the_plan_restores_replication_without_me(
            holders in proptest::collection::vec(proptest::collection::btree_set(1u64..8, 0..5), 1..20),
            r in 1usize..4,
        ) {
            let me = NodeId(7);
            let voters: Vec<NodeId> = (1..=5).map(NodeId).collect();
            let held: Vec<_> = (0..holders.len() as u8).map(b).collect();
            let of = |_: &NamespaceKey, id: &BlockId| -> Vec<NodeId> {
                holders[id.0[0] as usize].iter().map(|n| NodeId(*n)).collect()
            };
            let p = plan(me, r, &held, &voters, of);
            let mut seen = std::collections::HashSet::new();
            for (i, (_, id)) in held.iter().enumerate() {
                let on_voters = holders[i].iter().filter(|n| **n != 7 && **n <= 5).count();
                let planned: usize = p.iter().filter(|c| c.id == *id).map(|c| c.need).sum();
                prop_assert_eq!(on_voters + planned >= r, true);
                prop_assert_eq!(planned > 0, on_voters < r);
            }
            for c in &p {
                prop_assert!(seen.insert(c.id));
                prop_assert!(c.holders.contains(&me));
            }
        }
    }
}
