//! Which owners of a block a read tries, in which order: the live owners other than this node,
//! each once, fastest tier first (gpu, host, disk), then lowest id.

use kvfabric_directory::Owner;
use kvfabric_store::Tier;

use crate::ids::NodeId;

/// The owners of `owners` other than `me` for which `live` holds, best first.
pub fn rank_owners(me: NodeId, owners: &[Owner], live: impl Fn(NodeId) -> bool) -> Vec<NodeId> {
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
    best.sort_unstable();
    best.into_iter().map(|(_, n)| n).collect()
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
        let ranked = rank_owners(NodeId(1), &owners, |n| n != NodeId(5));
        assert_eq!(ranked, vec![NodeId(3), NodeId(4), NodeId(2)]);
    }
}
