//! Which owners of a block a read tries, in which order: the live owners other than this node,
//! each once — those this node does not suspect first, suspects last — and within each group
//! fastest tier first (gpu, host, disk), then lowest id. And what a read that got no copy
//! says ([`verdict`]): not found only when no live owner is known or every one answered that
//! it holds none; unreachable when owners exist but some gave no answer.

use kvfabric_directory::Owner;
use kvfabric_store::Tier;

use crate::ids::NodeId;

/// The owners of `owners` other than `me` for which `live` holds, best first; those for
/// which `suspect` holds after all the others.
pub fn rank_owners(
    me: NodeId,
    owners: &[Owner],
    live: impl Fn(NodeId) -> bool,
    suspect: impl Fn(NodeId) -> bool,
) -> Vec<(NodeId, Tier)> {
    let mut best: Vec<(Tier, NodeId)> = Vec::new();
    for o in owners {
        let node = NodeId(o.node.0);
        if node == me || !live(node) {
            continue;
        }
        match best.iter_mut().find(|(_, n)| *n == node) {
            Some(b) => b.0 = b.0.min(o.tier),
            None => best.push((o.tier, node)),
        }
    }
    best.sort_unstable_by_key(|(tier, n)| (suspect(*n), *tier, *n));
    best.into_iter().map(|(t, n)| (n, t)).collect()
}

/// How a read that was served by no owner ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No live owner is known, or every owner asked answered that it holds none: the block
    /// is not there to be read (404).
    NotFound,
    /// Owners exist but not every one answered (unreachable, timed out, unavailable, or its
    /// bytes failed verification): the block may well exist (503).
    Unreachable,
}

/// The verdict of a read over `tried` owners, `not_found` of which answered that they hold
/// no copy (the others gave no usable answer).
pub fn verdict(tried: usize, not_found: usize) -> Verdict {
    if tried == not_found {
        Verdict::NotFound
    } else {
        Verdict::Unreachable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_directory::Epoch;

    fn owner(node: u64, tier: Tier) -> Owner {
        Owner {
            node: NodeId(node),
            tier,
            epoch: Epoch(1),
        }
    }

    #[test]
    fn fastest_tier_first_then_lowest_id_each_owner_once() {
        let owners = [
            owner(3, Tier::Disk),
            owner(2, Tier::Disk),
            owner(4, Tier::Host),
            owner(3, Tier::Host),
            owner(1, Tier::Gpu),
            owner(5, Tier::Host),
        ];
        let ranked = rank_owners(NodeId(1), &owners, |n| n != NodeId(5), |_| false);
        let nodes: Vec<NodeId> = ranked.iter().map(|(n, _)| *n).collect();
        assert_eq!(nodes, vec![NodeId(3), NodeId(4), NodeId(2)]);
        assert_eq!(ranked[0].1, Tier::Host);
        let ranked = rank_owners(NodeId(1), &owners, |_| true, |n| n == NodeId(3));
        let nodes: Vec<NodeId> = ranked.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            nodes,
            vec![NodeId(4), NodeId(5), NodeId(2), NodeId(3)],
            "the suspect last"
        );
    }

    #[test]
    fn not_found_only_when_every_owner_said_so() {
        assert_eq!(verdict(0, 0), Verdict::NotFound, "no live owner known");
        assert_eq!(verdict(2, 2), Verdict::NotFound);
        assert_eq!(verdict(2, 1), Verdict::Unreachable);
        assert_eq!(verdict(1, 0), Verdict::Unreachable);
    }
}
