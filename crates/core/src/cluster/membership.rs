//! This node's incarnation in the directory: join (a new epoch per start, or after the lease
//! was lost), re-register the blocks it holds under that epoch, renew the lease.
//!
//! [`run`] loops for the life of the node. A join or renewal that fails for a transient reason
//! (no leader yet, a peer unreachable, a renewal not committed within its period) is retried
//! after [`RETRY_MS`]; a renewal the state
//! machine rejects (the lease expired and the records were purged, or a newer epoch exists)
//! starts a new incarnation: join again, register again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvfabric_directory::{Batcher, DirectoryError, Epoch, NodeId, OwnershipBatch};

use super::Cluster;

/// Pause between failed attempts to join or renew.
const RETRY_MS: u64 = 500;
/// How often a put whose incarnation ended looks for the next one.
const NEXT_POLL_MS: u64 = 50;

/// The current incarnation: its epoch and the batcher carrying its ownership records.
#[derive(Default)]
pub(crate) struct Incarnation {
    state: Mutex<Option<(Epoch, Arc<Batcher>)>>,
    registered: AtomicBool,
}

impl Incarnation {
    /// The epoch, once joined.
    pub(crate) fn epoch(&self) -> Option<Epoch> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(e, _)| *e)
    }

    /// The batcher of the current epoch, once joined.
    pub(crate) fn batcher(&self) -> Option<Arc<Batcher>> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, b)| b.clone())
    }

    /// The current epoch and its batcher, once joined.
    pub(crate) fn current(&self) -> Option<(Epoch, Arc<Batcher>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The batcher of the first incarnation after `epoch`, once this node joined again;
    /// `None` if it did not within `bound`.
    pub(crate) async fn next_after(&self, epoch: Epoch, bound: Duration) -> Option<Arc<Batcher>> {
        let wait = async {
            loop {
                if let Some((e, b)) = self.current() {
                    if e > epoch {
                        return b;
                    }
                }
                tokio::time::sleep(Duration::from_millis(NEXT_POLL_MS)).await;
            }
        };
        tokio::time::timeout(bound, wait).await.ok()
    }

    /// Whether the blocks held at join time are registered under the current epoch.
    pub(crate) fn registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    fn set(&self, epoch: Epoch, batcher: Batcher) -> Option<Arc<Batcher>> {
        self.registered.store(false, Ordering::Release);
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace((epoch, Arc::new(batcher)))
            .map(|(_, b)| b)
    }

    /// Takes the batcher out (shutdown), if no request holds it.
    pub(crate) fn take_batcher(&self) -> Option<Batcher> {
        let (_, b) = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        Arc::into_inner(b)
    }
}

/// Joins, registers and renews, for ever (the task is aborted at shutdown).
pub(crate) async fn run(cluster: Arc<Cluster>) {
    let me = NodeId(cluster.me.0);
    let retry = Duration::from_millis(RETRY_MS);
    let mut ended: Option<Epoch> = None;
    loop {
        let epoch = loop {
            match cluster.directory.join(me).await {
                Ok(e) => break e,
                Err(e) => {
                    tracing::info!(error = %e, "joining the directory; retrying");
                    tokio::time::sleep(retry).await;
                }
            }
        };
        tracing::info!(node = %cluster.me, epoch = epoch.0, "joined the directory");
        let batcher = Batcher::spawn(cluster.directory.clone(), me, epoch);
        if let Some(old) = cluster.incarnation.set(epoch, batcher) {
            if let Some(old) = Arc::into_inner(old) {
                old.close().await;
            }
        }
        loop {
            match register_held(&cluster, me, epoch).await {
                Ok(n) => {
                    tracing::info!(blocks = n, epoch = epoch.0, "held blocks registered");
                    warm_up(&cluster).await;
                    cluster
                        .incarnation
                        .registered
                        .store(true, Ordering::Release);
                    if let Some(old) = ended.take() {
                        // Event consumers cleared this node when its lease expired.
                        if let Err(e) = cluster.local.reannounce(cluster.me, old.0) {
                            tracing::warn!(error = %e, "re-announcing what is held failed");
                        }
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "registering held blocks; retrying");
                    tokio::time::sleep(retry).await;
                }
            }
        }
        // The first renewal right away: the join's lease ran from when it was proposed, and a
        // join that took an election or two to commit may have little of it left. Each
        // renewal is bounded by the renewal period, and one that failed is retried after
        // `RETRY_MS`, not a whole period: a renewal stuck behind a leader that died must not
        // use up the lease.
        let renew = cluster.config.lease_renew;
        let mut wait = Duration::ZERO;
        loop {
            tokio::time::sleep(wait).await;
            wait = retry.min(renew);
            match tokio::time::timeout(renew, cluster.directory.renew_lease(me, epoch)).await {
                Ok(Ok(_)) => wait = renew,
                Ok(Err(DirectoryError::Rejected(r))) => {
                    tracing::warn!(reason = ?r, "lease renewal rejected; joining again");
                    ended = Some(epoch);
                    break;
                }
                Ok(Err(e)) => tracing::info!(error = %e, "renewing the lease; will retry"),
                Err(_) => tracing::info!(
                    after_ms = renew.as_millis() as u64,
                    "renewing the lease timed out; will retry"
                ),
            }
        }
    }
}

/// Claims every block the store holds (by namespace: [`super::directory_block`]) under
/// `epoch`, in batches of `batch_records_max`.
async fn register_held(
    cluster: &Cluster,
    me: NodeId,
    epoch: Epoch,
) -> Result<usize, DirectoryError> {
    let held: Vec<_> = cluster
        .local
        .held_blocks()
        .map_err(|e| DirectoryError::Stopped {
            reason: format!("reading the store: {e}"),
        })?
        .into_iter()
        .map(|(ns, id, tier)| (super::directory_block(&ns, id), tier))
        .collect();
    let per_batch = cluster.directory.config().batch_records_max.max(1);
    for chunk in held.chunks(per_batch) {
        let batch = OwnershipBatch::claim(me, epoch, chunk.to_vec(), Vec::new());
        cluster.directory.update_ownership(batch).await?;
    }
    Ok(held.len())
}

/// Probes every other member once before the node says it is ready, so that the first put or
/// get does not pay for dialling (a handshake on a loaded machine can outlast the hedge);
/// what answers is healthy, what does not is suspected, as after any exchange. Bounded by
/// the suspicion window: a dead member delays readiness by no more.
async fn warm_up(cluster: &Arc<Cluster>) {
    let f = cluster.config.failover;
    let limit = Duration::from_millis(f.suspect_ms + f.hedge_ms);
    let probes = cluster
        .config
        .members
        .iter()
        .filter(|m| m.id != cluster.me)
        .map(|m| {
            let peer = super::block_peer(m);
            let c = cluster.clone();
            let id = m.id;
            async move {
                let probe = c.transport.probe(
                    &peer,
                    kvfabric_store::NamespaceKey([0; 32]),
                    kvfabric_store::BlockId([0; 32]),
                );
                let _ = c.attempt(id, &peer, probe).await;
            }
        });
    let _ = tokio::time::timeout(limit, futures_util::future::join_all(probes)).await;
}
