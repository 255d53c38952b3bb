//! kvfabric's store: the block model and the tiered local store of sealed KV blocks.
//!
//! Owns: model geometry and exact byte accounting ([`geometry`]), the canonical block layout
//! ([`block`]), content ids keyed per namespace ([`id`]), RoPE canonicalisation and rotation as
//! each model defines it ([`rope`]),
//! sealing with byte-verified dedup, refcounts, pins and copy-on-write ([`store`]), the GPU,
//! host and disk tiers ([`tier`]) with S3-FIFO eviction ([`eviction`]), and the per-request
//! arena for V4 sliding-window state ([`arena`]).
//!
//! Must never: know about the network or the directory; merge two different byte strings
//! under one block; hand out a raw address; evict a pinned block; serve bytes that do not hash
//! to the id asked for.

pub mod alloc;
pub mod arena;
#[cfg(feature = "bench")]
pub mod bench;
pub mod block;
pub mod chunk;
pub mod dtype;
pub mod error;
pub mod eviction;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod geometry;
pub mod handle;
pub mod hash_parallel;
pub mod id;
pub mod rope;
pub mod store;
pub mod tier;
pub mod units;
pub mod verified;

pub use block::{BlockHeader, HEADER_LEN};
pub use chunk::{chunk_keys, ChunkKey, ChunkMode};
pub use dtype::Dtype;
pub use error::{ConfigError, StoreError};
pub use geometry::{ModelGeometry, ModelKind};
pub use handle::{Handle, RegionIndex, Tier};
pub use id::{Blake3Ids, BlockId, IdHasher, IdStream, NamespaceKey, NamespaceSecret, StreamingId};
pub use store::{
    Comparison, Dedup, Demotion, DiskRead, Draft, Filling, GpuConfig, GpuPolicy, GpuRead,
    PinnedRead, Prepared, Promotion, PutForm, ReadStep, Reservation, RoomStep, SealStep, Sealed,
    SlotId, Store, StoreConfig, StoreCounters, TierMove, TierUsage, Unprepared,
};
pub use tier::TierBackend;
pub use units::{ByteCount, TokenCount};
pub use verified::VerifiedBlock;
