//! The [`Transport`] trait: fetch verified blocks from peers, push blocks to them, probe them,
//! serve blocks from a source.
//!
//! Every implementation (QUIC now; UCX and RDMA verbs behind features later) serves the
//! [`crate::BlockSource`] it was built with and fetches over one connection per peer, a
//! stream (or tagged message) per block, hashing bytes as they land through
//! [`crate::receive::BlockReceiver`]. The trait is object-safe so the node can pick an
//! implementation from its config at run time; [`crate::conformance`] checks any of them.

use std::future::Future;
use std::pin::Pin;

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};

use crate::counters::CountersSnapshot;
use crate::error::TransportError;
use crate::peer::PeerAddr;

/// A boxed, sendable future (keeps [`Transport`] object-safe).
pub type TransportFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A block fetched from one of several owners.
#[derive(Debug)]
pub struct Fetched {
    /// The verified block.
    pub block: VerifiedBlock,
    /// The owner that served it.
    pub owner: PeerAddr,
    /// Its position in the owner list.
    pub owner_index: usize,
    /// What went wrong with the owners tried before it, in order.
    pub failures: Vec<TransportError>,
}

/// Moves sealed blocks between nodes; only verified blocks come out.
pub trait Transport: Send + Sync {
    /// Fetches one block from `peer`, verifying it under `namespace` as it arrives.
    /// Bounded by `fetch_timeout_ms`; a verification failure is counted in `verify_failures`.
    fn fetch<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<VerifiedBlock, TransportError>>;

    /// Fetches several blocks from one peer concurrently over its one connection, at most
    /// `fetches_in_flight_max` at once; results in the order of `ids`.
    fn fetch_many<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        ids: &'a [BlockId],
    ) -> TransportFuture<'a, Vec<Result<VerifiedBlock, TransportError>>>;

    /// Pushes `block` to `peer`, which verifies it with the same streaming receiver, stores it
    /// and answers: `Ok` once it holds a verified copy (one round trip). Bounded by
    /// `fetch_timeout_ms`; refused bytes are [`TransportError::Rejected`], a copy not taken
    /// [`TransportError::Unavailable`].
    fn push<'a>(
        &'a self,
        peer: &'a PeerAddr,
        block: &'a VerifiedBlock,
    ) -> TransportFuture<'a, Result<(), TransportError>>;

    /// Asks `peer` whether it holds `id` under `namespace`, without moving the block: its
    /// stored length when it does, [`TransportError::NotFound`] when it does not. Bounded by
    /// `fetch_timeout_ms`; also how a caller learns a suspected peer answers again.
    fn probe<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<u64, TransportError>>;

    /// Tries `owners` in order until one serves bytes that verify; says which one did.
    fn fetch_from_owners<'a>(
        &'a self,
        owners: &'a [PeerAddr],
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<Fetched, TransportError>> {
        Box::pin(async move {
            if owners.is_empty() {
                return Err(TransportError::NoOwners { id });
            }
            let mut failures = Vec::new();
            for (owner_index, owner) in owners.iter().enumerate() {
                match self.fetch(owner, namespace, id).await {
                    Ok(block) => {
                        return Ok(Fetched {
                            block,
                            owner: owner.clone(),
                            owner_index,
                            failures,
                        })
                    }
                    Err(e) => {
                        tracing::warn!(%owner, %id, error = %e, "fetch failed; trying the next owner");
                        failures.push(e);
                    }
                }
            }
            Err(TransportError::AllOwnersFailed { id, failures })
        })
    }

    /// `peer` left an exchange begun at `since` unanswered past the caller's patience (a
    /// partition, a paused process, a dead node). The pooled block connection to it, if it
    /// was made before `since`, takes no new exchange: the next one connects afresh, so a
    /// peer that is back is reached at once rather than behind the old connection's
    /// retransmission backoff (QUIC doubles its probe timeout with every one lost: seconds
    /// after a gap of a few). Exchanges already on it go on; it closes once they end.
    /// Counted in `connections_set_aside`. The in-memory transport forgets the pair's
    /// "connection" and counts it (no backoff to escape there); UCX has nothing to set
    /// aside: its connections already end with their first abandoned exchange (responses
    /// come in order, one cannot be skipped).
    fn set_aside(&self, peer: &PeerAddr, since: std::time::Instant);

    /// How other nodes reach this one's server.
    fn local_peer(&self) -> PeerAddr;

    /// This instance's counters.
    fn counters(&self) -> CountersSnapshot;

    /// Stops serving and fetching; pending fetches end with an error.
    fn close(&self) -> TransportFuture<'_, ()>;
}

/// Runs `start(id)` for every id with at most `width` running at once; results come back in
/// the order of `ids`. What `fetch_many` does for every implementation. A fetch task that
/// panics re-raises its panic (a bug is not hidden as an error).
pub(crate) async fn in_order_bounded<T, Fut>(
    ids: &[BlockId],
    width: usize,
    mut start: impl FnMut(BlockId) -> Fut,
) -> Vec<Result<T, TransportError>>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, TransportError>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    let mut out: Vec<Option<Result<T, TransportError>>> = (0..ids.len()).map(|_| None).collect();
    let mut next = 0;
    loop {
        while next < ids.len() && tasks.len() < width.max(1) {
            let (i, fut) = (next, start(ids[next]));
            tasks.spawn(async move { (i, fut.await) });
            next += 1;
        }
        match tasks.join_next().await {
            Some(Ok((i, r))) => out[i] = Some(r),
            Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Some(Err(_)) => {}
            None => break,
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or(Err(TransportError::Closed)))
        .collect()
}
