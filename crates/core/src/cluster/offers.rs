//! Engine identities offered ahead of a push. The block transport's `Push` frame carries a
//! block's bytes and nothing else, so a member that pushes a copy of a block put with an
//! engine identity first offers that identity on the control channel
//! ([`ControlRequest::Offer`]); the member that takes the copy finds it here when it installs
//! the copy, and publishes the copy's `stored` event under the identity the block was put
//! with, as a copy fetched by a get is (which asks its source, `events::poll::peer_engine`).
//!
//! An offer that never arrives (a member that predates offers, a lost message) costs only the
//! identity: the copy is published under its id, as without one. Kept offers are bounded: at
//! most [`OFFERS_MAX`], each for [`OFFER_TTL_MS`] (longer than a put's whole replication), the
//! oldest dropped first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvfabric_store::{BlockId, NamespaceKey};

use super::control::{ControlRequest, ControlResponse};
use super::Cluster;
use crate::config::Member;
use crate::events::EngineBlock;

/// Offers kept at most.
pub(crate) const OFFERS_MAX: usize = 4096;
/// How long an offer is kept for the push it announces.
pub(crate) const OFFER_TTL_MS: u64 = 2 * super::replication::REPLICATE_TIMEOUT_MS;
/// Bound on offering one identity (the push follows it within the same attempt).
const OFFER_TIMEOUT_MS: u64 = 1_000;

/// An offered identity and when it arrived (ms on the cluster clock), by block.
type Kept = HashMap<(NamespaceKey, BlockId), (Arc<EngineBlock>, u64)>;

/// The offers this member received, by block.
#[derive(Debug, Default)]
pub(crate) struct Offers {
    kept: Mutex<Kept>,
    /// Offers made to peers that answered.
    pub(crate) sent: AtomicU64,
    /// Offers made to peers that did not take them (unreachable, or refused).
    pub(crate) failed: AtomicU64,
    /// Pushed copies installed with an offered identity.
    pub(crate) used: AtomicU64,
}

impl Offers {
    /// Keeps `engine` for the copy of `(ns, id)` about to be pushed here, at `now_ms`.
    pub(crate) fn keep(
        &self,
        ns: NamespaceKey,
        id: BlockId,
        engine: Arc<EngineBlock>,
        now_ms: u64,
    ) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= OFFERS_MAX && !kept.contains_key(&(ns, id)) {
            kept.retain(|_, (_, at)| now_ms.saturating_sub(*at) < OFFER_TTL_MS);
            if kept.len() >= OFFERS_MAX {
                let oldest = kept.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    kept.remove(&k);
                }
            }
        }
        kept.insert((ns, id), (engine, now_ms));
    }

    /// The identity offered for `(ns, id)`, if one was and it has not expired (taken: one
    /// offer, one copy).
    pub(crate) fn take(
        &self,
        ns: NamespaceKey,
        id: BlockId,
        now_ms: u64,
    ) -> Option<Arc<EngineBlock>> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let (engine, at) = kept.remove(&(ns, id))?;
        (now_ms.saturating_sub(at) < OFFER_TTL_MS).then(|| {
            self.used.fetch_add(1, Ordering::Relaxed);
            engine
        })
    }

    /// Offers kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Cluster {
    /// Offers `engine`, the identity of `(ns, id)`, to member `m` before a push of it. Its
    /// failure is counted and logged, not returned: the push goes on without it.
    pub(crate) async fn offer(
        &self,
        m: &Member,
        ns: NamespaceKey,
        id: BlockId,
        engine: &EngineBlock,
    ) {
        let addr = super::message_peer(&self.config, m).addr;
        let req = ControlRequest::Offer {
            namespace: ns,
            block: id,
            engine: engine.clone(),
        };
        let limit = Duration::from_millis(OFFER_TIMEOUT_MS);
        match self.control(m.id, addr, &req, limit).await {
            Ok(ControlResponse::Offered) => {
                self.offers.sent.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                self.offers.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %m.id, block = %id, answer = ?other, "an engine identity was not offered; the copy is published under its id");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(tag: u8) -> Arc<EngineBlock> {
        Arc::new(EngineBlock {
            engine: format!("vllm/{tag}"),
            page_hashes: vec![crate::events::EngineHash::Int(u64::from(tag))],
            parent: None,
            page_tokens: 64,
            token_ids: Vec::new(),
            lora_id: None,
            lora_name: None,
            group_idx: None,
            kv_cache_spec_kind: None,
        })
    }

    fn key(i: u32) -> (NamespaceKey, BlockId) {
        let mut id = [0u8; 32];
        id[..4].copy_from_slice(&i.to_le_bytes());
        (NamespaceKey::derive("offers"), BlockId(id))
    }

    #[test]
    fn an_offer_is_taken_once_for_its_block_and_namespace_only() {
        let o = Offers::default();
        let (ns, id) = key(1);
        o.keep(ns, id, engine(1), 0);
        assert_eq!(o.take(NamespaceKey::derive("other"), id, 1), None);
        assert_eq!(o.take(ns, key(2).1, 1), None);
        assert_eq!(o.take(ns, id, 1).as_deref(), Some(&*engine(1)));
        assert_eq!(o.take(ns, id, 2), None, "one offer, one copy");
        assert_eq!(o.used.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_expired_offer_is_not_used() {
        let o = Offers::default();
        let (ns, id) = key(1);
        o.keep(ns, id, engine(1), 100);
        assert_eq!(o.take(ns, id, 100 + OFFER_TTL_MS), None);
        assert_eq!(o.len(), 0);
        o.keep(ns, id, engine(2), 100);
        assert_eq!(
            o.take(ns, id, 99 + OFFER_TTL_MS).as_deref(),
            Some(&*engine(2))
        );
    }

    #[test]
    fn offers_are_bounded_expired_then_oldest_dropped_first() {
        let o = Offers::default();
        for i in 0..OFFERS_MAX as u32 {
            let (ns, id) = key(i);
            o.keep(ns, id, engine(1), u64::from(i));
        }
        assert_eq!(o.len(), OFFERS_MAX);
        // Full, none expired: the oldest (key 0) goes.
        let (ns, id) = key(OFFERS_MAX as u32);
        o.keep(ns, id, engine(2), OFFERS_MAX as u64);
        assert_eq!(o.len(), OFFERS_MAX);
        assert_eq!(o.take(ns, key(0).1, OFFERS_MAX as u64), None);
        assert!(o.take(ns, key(1).1, OFFERS_MAX as u64).is_some());
        // Full again later, every earlier one expired: they all go at once.
        o.keep(ns, key(1).1, engine(1), OFFERS_MAX as u64);
        let late = OFFERS_MAX as u64 + OFFER_TTL_MS + 10;
        let (_, fresh) = key(OFFERS_MAX as u32 + 1);
        o.keep(ns, fresh, engine(3), late);
        assert_eq!(o.len(), 1);
        assert_eq!(o.take(ns, fresh, late).as_deref(), Some(&*engine(3)));
    }
}
