//! Keeps this node's owner records' tiers current: when the store moves a held block between
//! tiers (a demotion to disk under memory pressure, a promotion on a hit), the move is
//! recorded in the directory as a claim in the new tier and a release of the old one, through
//! the incarnation's batcher, in the order the moves happened. A held block lost without a
//! delete (its bytes failed verification: [`HoldingChange::Lost`]) has its records in every
//! tier released, so the directory stops naming this node and re-replication sees the block
//! under-replicated.
//!
//! `POST /v1/route` prices a hit by the tier its owner record names, and a remote get picks
//! the owner with the fastest tier, so a stale tier costs a wrong ranking (never wrong bytes).
//! Moves made before the node joined need no record: joining registers every held block in
//! its tier at that moment. A record that fails to commit (no leader for the write timeout)
//! is counted and dropped; the next registration of the incarnation corrects it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::join_all;
use kvfabric_directory::OwnershipRecord;
use kvfabric_store::{Tier, TierMove};
use tokio::sync::mpsc;

use super::Cluster;
use crate::local::HoldingChange;

/// Moves taken from the channel into one round of records, at most.
const MOVES_PER_ROUND_MAX: usize = 1024;

/// What tier sync has done on this node.
#[derive(Debug, Default)]
pub(crate) struct TierSyncCounters {
    /// Moves recorded in the directory.
    pub(crate) recorded: AtomicU64,
    /// Moves whose records did not commit.
    pub(crate) failed: AtomicU64,
    /// Moves seen before the node had joined (covered by its registration).
    pub(crate) before_join: AtomicU64,
    /// Lost copies whose records were released.
    pub(crate) lost_released: AtomicU64,
}

/// The records one move becomes: the new tier claimed before the old one is released, so the
/// block is never without an owner record in between.
pub(crate) fn records(m: &TierMove) -> [OwnershipRecord; 2] {
    let block = super::directory_block(&m.namespace, m.id);
    [
        OwnershipRecord::Claim {
            block,
            tier: m.to,
            chunk: None,
        },
        OwnershipRecord::Release {
            block,
            tier: m.from,
        },
    ]
}

/// The records a change becomes: a move's two ([`records`]), or a loss's release in every
/// tier (releasing a tier not claimed changes nothing).
pub(crate) fn change_records(c: &HoldingChange) -> Vec<OwnershipRecord> {
    match c {
        HoldingChange::Moved(m) => records(m).to_vec(),
        HoldingChange::Lost { namespace, id } => {
            let block = super::directory_block(namespace, *id);
            [Tier::Gpu, Tier::Host, Tier::Disk]
                .into_iter()
                .map(|tier| OwnershipRecord::Release { block, tier })
                .collect()
        }
    }
}

/// Records changes from `rx` until the store side drops its sender (aborted at shutdown).
pub(crate) async fn run(cluster: Arc<Cluster>, mut rx: mpsc::UnboundedReceiver<HoldingChange>) {
    let c = &cluster.tier_sync;
    while let Some(first) = rx.recv().await {
        let mut moves = vec![first];
        while moves.len() < MOVES_PER_ROUND_MAX {
            match rx.try_recv() {
                Ok(m) => moves.push(m),
                Err(_) => break,
            }
        }
        let Some(batcher) = cluster.incarnation.batcher() else {
            c.before_join
                .fetch_add(moves.len() as u64, Ordering::Relaxed);
            continue;
        };
        // Submitted in order (join_all polls in order): the batcher keeps the last operation
        // on each record.
        let per_change: Vec<Vec<OwnershipRecord>> = moves.iter().map(change_records).collect();
        let submits = per_change.iter().flatten().map(|r| batcher.submit(*r));
        let mut results = join_all(submits).await.into_iter();
        let mut failed = 0u64;
        for (change, recs) in moves.iter().zip(&per_change) {
            let ok = results.by_ref().take(recs.len()).all(|r| r.is_ok());
            if !ok {
                failed += 1;
            } else if matches!(change, HoldingChange::Lost { .. }) {
                c.lost_released.fetch_add(1, Ordering::Relaxed);
            }
        }
        if failed > 0 {
            tracing::warn!(failed, "tier moves or losses not recorded in the directory");
        }
        c.failed.fetch_add(failed, Ordering::Relaxed);
        c.recorded
            .fetch_add(moves.len() as u64 - failed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_store::{BlockId, NamespaceKey, SlotId, Tier};

    #[test]
    fn a_move_claims_the_new_tier_before_releasing_the_old() {
        let id = BlockId([3; 32]);
        let m = TierMove {
            slot: SlotId(1),
            id,
            namespace: NamespaceKey([1; 32]),
            from: Tier::Host,
            to: Tier::Disk,
        };
        let block = crate::cluster::directory_block(&m.namespace, id);
        assert_ne!(block, id, "recorded by namespace");
        assert_eq!(
            records(&m),
            [
                OwnershipRecord::Claim {
                    block,
                    tier: Tier::Disk,
                    chunk: None
                },
                OwnershipRecord::Release {
                    block,
                    tier: Tier::Host
                },
            ]
        );
    }

    #[test]
    fn a_lost_copy_releases_every_tier() {
        let (namespace, id) = (NamespaceKey([1; 32]), BlockId([4; 32]));
        let block = crate::cluster::directory_block(&namespace, id);
        let recs = change_records(&HoldingChange::Lost { namespace, id });
        let tiers: Vec<Tier> = recs
            .iter()
            .map(|r| match r {
                OwnershipRecord::Release { block: b, tier } if *b == block => *tier,
                other => panic!("expected a release of {block}, found {other:?}"),
            })
            .collect();
        assert_eq!(tiers, [Tier::Gpu, Tier::Host, Tier::Disk]);
    }
}
