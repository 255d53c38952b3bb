//! Peer health on this node: the pure [`Health`] of [`crate::decide::health`] behind a lock,
//! fed by every exchange with a peer ([`PeerHealth::record`]) and by a probe task that asks
//! each suspect, when it is due, whether it holds an all-zero id (any answer — "not found" —
//! proves it alive), each probe in a task of its own. Counted for `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvfabric_directory::Clock;
use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::TransportError;

use super::Cluster;
use crate::decide::health::Health;
use crate::ids::NodeId;

/// Counters of peer health.
#[derive(Debug, Default)]
pub(crate) struct HealthCounters {
    /// Times a healthy peer became a suspect.
    pub(crate) suspected: AtomicU64,
    /// Times a suspect answered again.
    pub(crate) cleared: AtomicU64,
    /// Probes sent to suspects.
    pub(crate) probes: AtomicU64,
}

/// This node's view of its peers' health.
pub(crate) struct PeerHealth {
    state: Mutex<Health>,
    clock: Arc<dyn Clock>,
    /// What happened, for `/metrics`.
    pub(crate) counters: HealthCounters,
}

impl PeerHealth {
    /// No suspects; probes after `probe_ms`, backing off to `probe_ms_max`.
    pub(crate) fn new(clock: Arc<dyn Clock>, probe_ms: u64, probe_ms_max: u64) -> PeerHealth {
        PeerHealth {
            state: Mutex::new(Health::new(probe_ms, probe_ms_max)),
            clock,
            counters: HealthCounters::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the outcome of an exchange with `peer`: no answer at all suspects it, any
    /// answer clears it.
    pub(crate) fn record<T>(&self, peer: NodeId, outcome: &Result<T, TransportError>) {
        match outcome {
            Err(e) if e.is_peer_unreachable() => {
                let now_ms = self.clock.now_ms();
                let mut h = self.lock();
                if !h.is_suspect(peer) {
                    self.counters.suspected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, error = %e, "peer suspected: no answer");
                }
                h.failed(peer, now_ms);
            }
            Err(TransportError::Closed) => {}
            _ => {
                if self.lock().answered(peer) {
                    self.counters.cleared.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(%peer, "suspected peer answered again");
                }
            }
        }
    }

    /// `peer` has been silent past `failover.suspect_ms` in an attempt still running:
    /// suspect it now (its answer, if it comes, clears it).
    pub(crate) fn silent(&self, peer: NodeId, addr: &kvfabric_transport::PeerAddr) {
        let now_ms = self.clock.now_ms();
        let mut h = self.lock();
        if !h.is_suspect(peer) {
            self.counters.suspected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, %addr, "peer suspected: silent");
        }
        h.failed(peer, now_ms);
    }

    /// Whether `peer` is suspected.
    pub(crate) fn is_suspect(&self, peer: NodeId) -> bool {
        self.lock().is_suspect(peer)
    }

    /// Suspects now.
    pub(crate) fn suspects(&self) -> Vec<NodeId> {
        self.lock().suspects().map(|(p, _)| p).collect()
    }

    /// The suspects due for a probe now (rescheduled).
    fn due(&self) -> Vec<NodeId> {
        let now_ms = self.clock.now_ms();
        self.lock().due(now_ms)
    }
}

impl Cluster {
    /// Probes, in the background, members whose attempt was dropped unanswered when another
    /// candidate won: a silent one is suspected (within its attempt bound), a slow one is
    /// found healthy; no block moves for it.
    pub(crate) fn check_abandoned(self: &Arc<Self>, members: Vec<NodeId>) {
        for id in members {
            let Some(m) = self.member(id) else {
                continue;
            };
            let (cluster, addr) = (self.clone(), super::block_peer(&m));
            tokio::spawn(async move {
                let probe = cluster
                    .transport
                    .probe(&addr, NamespaceKey([0; 32]), BlockId([0; 32]));
                let _ = cluster.attempt(id, &addr, probe).await;
            });
        }
    }
}

/// Probes suspects when due, for the life of the node (aborted at shutdown, and its probes
/// with it). Ticks every `tick`; what is due is decided by the health clock. Each probe runs
/// in a task of its own, so a silent suspect's probe, waiting out its attempt bound, holds
/// no other suspect's; a suspect whose probe is still unanswered is not probed again on top
/// of it (its next one is sent once that one has ended and it is due).
pub(crate) async fn run(cluster: Arc<Cluster>, tick: Duration) {
    let mut probes = tokio::task::JoinSet::new();
    let mut probing: HashMap<tokio::task::Id, NodeId> = HashMap::new();
    loop {
        tokio::time::sleep(tick).await;
        while let Some(ended) = probes.try_join_next_with_id() {
            let id = match ended {
                Ok((id, ())) => id,
                Err(e) => e.id(),
            };
            probing.remove(&id);
        }
        for peer in cluster.health.due() {
            if probing.values().any(|p| *p == peer) {
                continue;
            }
            let Some(m) = cluster.member(peer) else {
                continue;
            };
            cluster
                .health
                .counters
                .probes
                .fetch_add(1, Ordering::Relaxed);
            let cluster = cluster.clone();
            let task = probes.spawn(async move {
                let addr = super::block_peer(&m);
                let probe = cluster
                    .transport
                    .probe(&addr, NamespaceKey([0; 32]), BlockId([0; 32]));
                let _ = cluster.attempt(peer, &addr, probe).await;
            });
            probing.insert(task.id(), peer);
        }
    }
}
