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

use super::Cluster;
use crate::decide::repair::plan;

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
            |ns, id| {
                cluster
                    .live_holders(&super::directory_block(ns, *id))
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
            let made = cluster
                .copy_to_peers(r.ns, r.id, r.need, &r.live)
                .await
                .len();
            tracing::info!(block = %r.id, need = r.need, made, "re-replicated an under-replicated block");
            c.copies_made.fetch_add(made as u64, Ordering::Relaxed);
            c.copies_missing
                .fetch_add(r.need.saturating_sub(made) as u64, Ordering::Relaxed);
        }
        c.passes.fetch_add(1, Ordering::Relaxed);
        suspects = p.under;
    }
}
