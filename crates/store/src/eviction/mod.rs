//! Eviction policy: which block a full tier gives up first.
//!
//! kvfabric uses S3-FIFO ([`s3fifo::S3Fifo`]). KV workloads are a few highly shared blocks
//! (system prompts, tool schemas, documents every agent reads) drowned in one-hit blocks (each
//! agent's private suffix). S3-FIFO's small probationary queue lets one-hit blocks leave
//! without ever touching the main queue, so a burst of private suffixes cannot flush the shared
//! blocks the way it flushes an LRU (scan resistance); its ghost queue brings back a demoted
//! block straight into the main queue when it is asked for again. A hit only bumps a 2-bit
//! counter (no list relinking), which keeps the hit path cheap under the store's lock.
//!
//! The policy never decides alone: the store passes a predicate, and a block it refuses
//! (pinned, or referenced on the last tier) is skipped, never evicted.

pub mod s3fifo;

/// Stable identity of a stored block instance; never reused (see [`crate::store`]).
pub use crate::store::SlotId;
