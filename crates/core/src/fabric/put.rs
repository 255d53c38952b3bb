//! [`Fabric::put`]: a payload received straight into a store reservation, sealed, held, its
//! ownership (and chunk keys) recorded in the directory, and its copies made on other
//! members before it is acknowledged.
//!
//! A put whose bytes collide with another block's id (a dedup collision, a security signal)
//! is sealed as a block of its own, a later *variant* of that id on this node: its answer
//! names the variant, it is held here only (not replicated, not registered, its chunk keys not
//! recorded: all of them name a block by id, which reads as variant 0).
//!
//! The body arrives piece by piece through [`PutBody`] (the store lock is taken per piece,
//! never across a read); any refusal after the first byte cancels the reservation, so arena
//! room is never leaked.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use kvfabric_store::{BlockId, ByteCount, Dedup, NamespaceKey, PutForm, Tier};

use super::Fabric;
use crate::error::FabricError;
use crate::events::{BlockInfo, EngineBlock};
use crate::ids::{ChunkKey, NodeId};
use crate::local::{PutError, PutSession};
use crate::presets::Model;

/// Copies acknowledged on a standalone node.
const REPLICAS_LOCAL: u32 = 1;

/// Where a put's payload comes from, piece by piece.
pub trait PutBody: Send {
    /// Why the body could not be read (the caller's own error).
    type Error: Send;
    /// The next piece; `None` at the end of the body.
    fn next_piece(&mut self) -> impl Future<Output = Result<Option<Bytes>, Self::Error>> + Send;
}

/// What a put is, decided before its body is read.
#[derive(Debug, Clone)]
pub struct PutRequest<'a> {
    /// The namespace it is sealed in.
    pub ns: NamespaceKey,
    /// Its model.
    pub model: &'a Model,
    /// Canonical or rotated.
    pub form: PutForm,
    /// The chunk keys naming the block (a prefix key, a position-independent key).
    pub chunk_keys: Vec<ChunkKey>,
    /// The engine's identity of the block (checked against the model's block tokens), for
    /// the events routers index it by.
    pub engine: Option<Arc<EngineBlock>>,
}

/// An acknowledged put.
#[derive(Debug, Clone)]
pub struct PutDone {
    /// Content id.
    pub id: BlockId,
    /// What dedup decided.
    pub dedup: Dedup,
    /// Stored bytes (header + payload).
    pub bytes: ByteCount,
    /// The tier it landed in here.
    pub tier: Tier,
    /// Verified copies on distinct nodes, this one's included.
    pub replicas: u32,
    /// The nodes that acknowledged holding a verified copy, this one first.
    pub holders: Vec<NodeId>,
    /// Which of this node's blocks under `id` it is (0 unless a dedup collision made it
    /// another block: read it with this variant; see [`Fabric::get_variant`]).
    pub variant: u32,
}

/// Why a put failed: its body, or the fabric.
#[derive(Debug)]
pub enum PutFailure<E> {
    /// The body could not be read.
    Body(E),
    /// The fabric refused or failed.
    Fabric(FabricError),
}

impl<E> From<FabricError> for PutFailure<E> {
    fn from(e: FabricError) -> PutFailure<E> {
        PutFailure::Fabric(e)
    }
}

impl Fabric {
    /// Receives `body` into a reservation for one block of `req.model`, seals it under
    /// `req.ns`, holds it and records its chunk keys; on a cluster member, claims it in the
    /// directory (one claim per chunk key, in flight together) while pushing copies, and
    /// acknowledges once both the claim committed and `replication` verified copies exist on
    /// distinct members. A body of the wrong length is [`FabricError::PayloadLength`] (with
    /// the bytes seen so far); the rest of such a body is left unread for the caller.
    pub async fn put<B: PutBody>(
        &self,
        req: PutRequest<'_>,
        body: &mut B,
    ) -> Result<PutDone, PutFailure<B::Error>> {
        let g = &req.model.geometry;
        let expected = req.model.layout.payload_len;
        let info = BlockInfo {
            block_tokens: req.model.layout.block_tokens,
            engine: req.engine.clone(),
        };
        info.check().map_err(FabricError::EngineBlock)?;
        let mut session = PutSession::begin(&self.local, g, expected).map_err(FabricError::from)?;
        while let Some(piece) = body.next_piece().await.map_err(PutFailure::Body)? {
            match session.write(&piece) {
                Ok(()) => {}
                Err(PutError::Length { .. }) => {
                    let found = session.written() + piece.len() as u64;
                    return Err(FabricError::PayloadLength { expected, found }.into());
                }
                Err(PutError::Local(e)) => return Err(FabricError::from(e).into()),
            }
        }
        let sealed = match session.seal(req.ns, g, req.form, &req.chunk_keys, info) {
            Ok(s) => s,
            Err(PutError::Length { expected, found }) => {
                return Err(FabricError::PayloadLength { expected, found }.into())
            }
            Err(PutError::Local(e)) => return Err(FabricError::from(e).into()),
        };
        tracing::debug!(block = %sealed.id, model = %g.name, dedup = sealed.dedup.name(), "sealed");
        let (replicas, holders) = match &self.cluster {
            // A later variant is this node's alone: the directory and a peer's copy name a
            // block by id, which reads as variant 0 (other bytes).
            None => (REPLICAS_LOCAL, vec![self.me]),
            Some(_) if sealed.variant > 0 => (REPLICAS_LOCAL, vec![self.me]),
            Some(cluster) => {
                // The claim and the copies in flight together: after a leader's loss both
                // wait for the next election, once, not one after the other.
                let (claimed, r) = tokio::join!(
                    cluster.claim_put(req.ns, sealed.id, sealed.tier, &req.chunk_keys),
                    cluster.replicate(req.ns, sealed.id)
                );
                claimed?;
                if r.have < r.want {
                    return Err(FabricError::ReplicationIncomplete {
                        block: sealed.id,
                        have: r.have,
                        want: r.want,
                    }
                    .into());
                }
                let holders = std::iter::once(self.me).chain(r.holders).collect();
                (r.have, holders)
            }
        };
        Ok(PutDone {
            id: sealed.id,
            dedup: sealed.dedup,
            bytes: sealed.bytes,
            tier: sealed.tier,
            replicas,
            holders,
            variant: sealed.variant,
        })
    }
}
