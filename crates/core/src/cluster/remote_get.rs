//! A get (or head) that misses locally: the block's owners from this node's directory replica,
//! the live ones ranked ([`crate::decide::owners`]: suspects last, then fastest tier, then
//! lowest id), tried over the block transport, verified as the bytes arrive; each attempt
//! bounded by `failover.attempt_ms`, the next owner started beside one silent for
//! `failover.hedge_ms`, a failed one replaced at once (`attempt`), each outcome fed to peer
//! health. A fetched copy is installed here and this node registers itself as an owner; a
//! head asks the owners with a probe and moves nothing.
//!
//! The outcome is typed ([`Miss`]): not found only when no live owner is known or every one
//! asked answered that it holds no copy; unreachable when owners exist but not every one
//! answered — a 404 for an acknowledged block would be a lie to the engine.
//!
//! This node's replica may lag the leader by a commit: a copy pushed or fetched moments ago
//! is registered at the leader before this replica hears of it (and if that leader dies, not
//! until its successor replicates it). So when the replica names no owner, or every owner it
//! names failed, the read takes a read barrier (the directory's linearizable read: every
//! registration committed before it is applied here; an exchange with the leader, so bounded
//! by `failover.attempt_ms` like any other) and asks the owners it then names that were not
//! asked yet, once. A 404 therefore means that nobody live holds the block as of every
//! registration committed before the read; without a barrier (no leader or quorum in the
//! bound) the read is a 503, never a 404 (session 26's seed-27 chaos run: a put acknowledged
//! on one node, then a get on another whose replica had not yet applied the registration,
//! answered 404 at once). This costs nothing on the paths that succeed; a miss pays one
//! exchange with the leader.
//!
//! Namespaces: the directory keys owner records by namespace
//! ([`super::directory_block`]), so owners are looked up under each namespace the caller may
//! read (all of them, whatever is found) and only those are asked, naming that namespace: an
//! id held under another tenant's namespace has no owner under the caller's, and its miss
//! ends here, before any peer is asked, exactly as for an id nobody holds.
//!
//! Every fetch that succeeds is timed (from its start to the verified block) into the
//! bandwidth table as a sample of the link from the serving owner to this node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_directory::ReadConsistency;
use kvfabric_store::{BlockId, NamespaceKey, Tier, VerifiedBlock};
use kvfabric_transport::{PeerAddr, TransportError};

use super::{attempt, Cluster};
use crate::decide::owners::{rank_owners, verdict, Verdict};
use crate::ids::NodeId;

/// Bound on registering the fetched copy (the get is served either way).
const REGISTER_TIMEOUT_MS: u64 = 5_000;

/// A block fetched from a peer.
pub(crate) struct RemoteHit {
    /// The verified block.
    pub(crate) block: VerifiedBlock,
    /// The tier it was installed in here (its owner's, when it could not be installed).
    pub(crate) tier: Tier,
    /// The owner that served it.
    pub(crate) source: NodeId,
}

/// A block a peer holds, as a probe found it.
pub(crate) struct RemoteHead {
    /// The owner that answered.
    pub(crate) source: NodeId,
    /// The tier its owner record names.
    pub(crate) tier: Tier,
    /// The block's stored length (header ‖ payload).
    pub(crate) stored_len: u64,
}

/// Why no owner served a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No live owner is known after a read barrier, or every one asked holds no copy.
    NotFound,
    /// Owners exist, but these did not answer (or answered unusably).
    Unreachable(Vec<NodeId>),
    /// This replica names no owner, and no read barrier could confirm that (no leader or
    /// quorum within the bound): the block may be registered where this node cannot see.
    NoBarrier(String),
}

impl Cluster {
    /// Live owners of `(ns, id)` other than this node, ranked, with the tier each holds it in.
    fn ranked_owners(&self, ns: &NamespaceKey, id: &BlockId) -> Vec<(NodeId, Tier)> {
        let key = super::directory_block(ns, *id);
        let owners = self.directory.view().read(|s| s.owners(&key));
        let now_ms = self.clock.now_ms();
        rank_owners(
            self.me,
            &owners,
            |n| self.is_live(n, now_ms),
            |n| self.health.is_suspect(n),
        )
    }

    /// Runs `exchange(peer, ns)` over `id`'s ranked owners under each namespace of `read`
    /// (the owners recorded under that namespace: another tenant's are never asked) until one
    /// succeeds; the winner with the namespace it served under, or the verdict. When every
    /// owner this replica names failed, once more after a read barrier over the owners it
    /// names then that were not asked (see the module docs).
    async fn from_owners<T, F, Fut>(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: BlockId,
        exchange: F,
    ) -> Result<(NodeId, Tier, NamespaceKey, T), Miss>
    where
        T: Send + 'static,
        F: Fn(Arc<Cluster>, PeerAddr, NamespaceKey) -> Fut + Copy + Send + 'static,
        Fut: std::future::Future<Output = Result<T, TransportError>> + Send + 'static,
    {
        let mut asked: Vec<NodeId> = Vec::new();
        // Found nothing: the block may be registered at the leader and not yet here.
        let unreachable = match self.owner_round(read, id, exchange, &mut asked).await {
            Err(Miss::Unreachable(u)) => u,
            Err(Miss::NotFound) => Vec::new(),
            done => return done,
        };
        let bound = Duration::from_millis(self.config.failover.attempt_ms);
        let barrier = self.directory.read(ReadConsistency::Linearizable, |_| ());
        let no_barrier = |reason: String| {
            tracing::debug!(block = %id, %reason, "no read barrier: the replica's owners stand");
            if unreachable.is_empty() {
                Miss::NoBarrier(reason)
            } else {
                Miss::Unreachable(unreachable.clone())
            }
        };
        match tokio::time::timeout(bound, barrier).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(no_barrier(e.to_string())),
            Err(_) => {
                return Err(no_barrier(format!(
                    "no leader confirmed a read within {} ms",
                    bound.as_millis()
                )))
            }
        }
        match self.owner_round(read, id, exchange, &mut asked).await {
            Ok(won) => {
                tracing::info!(block = %id, "served by an owner this replica learnt of after a read barrier");
                Ok(won)
            }
            // Nobody live holds it, as of every registration committed before the barrier.
            Err(Miss::NotFound) if unreachable.is_empty() => Err(Miss::NotFound),
            // Owners first asked now answered that they hold none: those that did not answer
            // before still might.
            Err(Miss::NotFound) => Err(Miss::Unreachable(unreachable)),
            Err(Miss::Unreachable(more)) => {
                // Disjoint: the second round asks only owners the first did not.
                let mut all = unreachable;
                all.extend(more);
                Err(Miss::Unreachable(all))
            }
            // A round asks peers only; it never takes a barrier.
            Err(m @ Miss::NoBarrier(_)) => Err(m),
        }
    }

    /// One round of [`Cluster::from_owners`] over the owners not in `asked`, each added to it.
    async fn owner_round<T, F, Fut>(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: BlockId,
        exchange: F,
        asked: &mut Vec<NodeId>,
    ) -> Result<(NodeId, Tier, NamespaceKey, T), Miss>
    where
        T: Send + 'static,
        F: Fn(Arc<Cluster>, PeerAddr, NamespaceKey) -> Fut + Copy + Send + 'static,
        Fut: std::future::Future<Output = Result<T, TransportError>> + Send + 'static,
    {
        // Every namespace's owners first: with none under any of the caller's namespaces the
        // miss ends here, before any peer is asked, whatever other tenants hold.
        let by_ns: Vec<_> = read
            .iter()
            .map(|ns| {
                let mut owners = self.ranked_owners(ns, &id);
                owners.retain(|(n, _)| !asked.contains(n));
                (*ns, owners)
            })
            .filter(|(_, owners)| !owners.is_empty())
            .collect();
        if by_ns.is_empty() {
            return Err(Miss::NotFound);
        }
        let hedge = Duration::from_millis(self.config.failover.hedge_ms);
        let mut unreachable: Vec<NodeId> = Vec::new();
        for (ns, owners) in by_ns {
            asked.extend(owners.iter().map(|(n, _)| *n));
            let attempt_one = |(n, tier): (NodeId, Tier)| {
                let cluster = self.clone();
                async move {
                    let m = cluster.member(n).ok_or(TransportError::NoOwners { id })?;
                    let peer = super::block_peer(&m);
                    let work = exchange(cluster.clone(), peer.clone(), ns);
                    let r = cluster.attempt(n, &peer, work).await;
                    r.map(|t| (tier, t))
                }
            };
            let g = attempt::until(owners.clone(), 1, hedge, attempt_one).await;
            self.check_abandoned(g.abandoned.iter().map(|(n, _)| *n).collect());
            if let Some(((n, _), (tier, t))) = g.won.into_iter().next() {
                return Ok((n, tier, ns, t));
            }
            let not_found = g
                .failed
                .iter()
                .filter(|(_, e)| matches!(e, TransportError::NotFound { .. }))
                .count();
            if verdict(g.tried, not_found) == Verdict::Unreachable {
                for ((n, _), e) in &g.failed {
                    if !matches!(e, TransportError::NotFound { .. }) && !unreachable.contains(n) {
                        tracing::warn!(owner = %n, block = %id, error = %e, "an owner did not serve");
                        unreachable.push(*n);
                    }
                }
            }
        }
        if unreachable.is_empty() {
            Err(Miss::NotFound)
        } else {
            Err(Miss::Unreachable(unreachable))
        }
    }

    /// Fetches `id` from its live owners under the first namespace of `read` that has it,
    /// installs and registers it.
    pub(crate) async fn fetch_remote(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: BlockId,
    ) -> Result<RemoteHit, Miss> {
        let fetch = move |c: Arc<Cluster>, peer: PeerAddr, ns: NamespaceKey| async move {
            let started = Instant::now();
            let b = c.transport.fetch(&peer, ns, id).await?;
            Ok((b, started.elapsed()))
        };
        let (source, owner_tier, ns, (block, elapsed)) = self.from_owners(read, id, fetch).await?;
        self.bandwidth
            .record(source, block.bytes().len() as u64, elapsed);
        let engine = crate::events::poll::peer_engine(self, source, block.namespace(), id).await;
        let tier = match self.local.install_with(&block, engine).await {
            Ok(t) => t,
            Err(e) => {
                // Verified bytes are served whether or not this node keeps a copy.
                tracing::warn!(block = %id, error = %e, "installing a fetched block failed");
                return Ok(RemoteHit {
                    block,
                    tier: owner_tier,
                    source,
                });
            }
        };
        if let Some(b) = self.incarnation.batcher() {
            // Registered in the background: the verified bytes are served now, whether or not
            // the directory has a leader at this moment (after a leader's loss it may not).
            tokio::spawn(async move {
                let claim = b.claim(super::directory_block(&ns, id), tier, None);
                match tokio::time::timeout(Duration::from_millis(REGISTER_TIMEOUT_MS), claim).await
                {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(block = %id, error = %e, "registering a fetched copy failed")
                    }
                    Err(_) => tracing::warn!(block = %id, "registering a fetched copy timed out"),
                }
            });
        }
        Ok(RemoteHit {
            block,
            tier,
            source,
        })
    }

    /// Asks `id`'s live owners, under each namespace of `read`, whether they hold it — what a
    /// get would find, without moving it.
    pub(crate) async fn probe_remote(
        self: &Arc<Self>,
        read: &[NamespaceKey],
        id: BlockId,
    ) -> Result<RemoteHead, Miss> {
        let probe = move |c: Arc<Cluster>, peer: PeerAddr, ns: NamespaceKey| async move {
            c.transport.probe(&peer, ns, id).await
        };
        let (source, tier, _, stored_len) = self.from_owners(read, id, probe).await?;
        Ok(RemoteHead {
            source,
            tier,
            stored_len,
        })
    }

    /// Live owners of `(ns, id)` as node ids (for lookups).
    pub(crate) fn live_owner_ids(&self, ns: &NamespaceKey, id: BlockId) -> Vec<NodeId> {
        let now_ms = self.clock.now_ms();
        let key = super::directory_block(ns, id);
        let mut ids: Vec<NodeId> = self
            .directory
            .view()
            .read(|s| s.owners(&key))
            .into_iter()
            .map(|o| NodeId(o.node.0))
            .filter(|n| self.is_live(*n, now_ms))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The block a chunk key names under one of `read`'s namespaces, and that namespace, at
    /// `consistency` (linearizable: reflects every registration completed before the call,
    /// or an error).
    pub(crate) async fn resolve_chunk_at(
        &self,
        read: &[NamespaceKey],
        key: crate::ids::ChunkKey,
        consistency: ReadConsistency,
    ) -> Result<Option<(NamespaceKey, BlockId)>, kvfabric_directory::DirectoryError> {
        let mut found = None;
        for (i, ns) in read.iter().enumerate() {
            let k = super::directory_chunk_key(ns, key);
            // One barrier is enough: later namespaces read the state it brought up to date.
            let c = if i == 0 {
                consistency
            } else {
                ReadConsistency::Local
            };
            // Every namespace is read (no early exit): the work does not depend on which
            // one, if any, maps the key.
            let b = self.directory.resolve(&k, c).await?;
            if found.is_none() {
                found = b.map(|b| (*ns, super::block_of_directory(ns, b)));
            }
        }
        Ok(found)
    }
}
