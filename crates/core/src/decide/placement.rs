//! Where a new block's copies go: the members other than this one that may take a copy,
//! ordered by a rendezvous score `blake3(block ‖ member id)`, so that the same block goes to
//! the same members from any node and load spreads across members. The caller asks them in
//! this order and replaces a member that fails by the next.

use kvfabric_store::BlockId;

use crate::ids::NodeId;

/// The rendezvous score of `member` for `block` (lower is asked first).
fn score(block: &BlockId, member: NodeId) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&block.0);
    h.update(&member.0.to_le_bytes());
    *h.finalize().as_bytes()
}

/// The members of `members` other than `me` for which `eligible` holds, best target for
/// `block` first.
pub fn replica_order(
    block: &BlockId,
    me: NodeId,
    members: &[NodeId],
    eligible: impl Fn(NodeId) -> bool,
) -> Vec<NodeId> {
    let mut peers: Vec<([u8; 32], NodeId)> = members
        .iter()
        .copied()
        .filter(|m| *m != me && eligible(*m))
        .map(|m| (score(block, m), m))
        .collect();
    peers.sort_unstable();
    peers.dedup_by_key(|(_, m)| *m);
    peers.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The order is a permutation of the eligible others, the same from every member that
        /// computes it (excluding itself), and never names `me` or an ineligible member.
        #[test]
        fn the_order_is_the_same_permutation_from_anywhere(
            block in any::<[u8; 32]>(),
            n in 1u64..12,
            me in 1u64..12,
            dead in any::<u16>(),
        ) {
            let members: Vec<NodeId> = (1..=n).map(NodeId).collect();
            let eligible = |m: NodeId| dead & (1 << m.0) == 0;
            let id = BlockId(block);
            let order = replica_order(&id, NodeId(me), &members, eligible);
            prop_assert!(!order.contains(&NodeId(me)));
            prop_assert!(order.iter().all(|m| eligible(*m) && members.contains(m)));
            let want = members.iter().filter(|m| m.0 != me && eligible(**m)).count();
            prop_assert_eq!(order.len(), want);
            // Another member computing it (without itself) sees the same relative order.
            let other = NodeId(me % n + 1);
            let theirs = replica_order(&id, other, &members, eligible);
            let mine: Vec<_> = order.iter().filter(|m| **m != other).collect();
            let theirs: Vec<_> = theirs.iter().filter(|m| m.0 != me).collect();
            prop_assert_eq!(mine, theirs);
        }
    }
}
