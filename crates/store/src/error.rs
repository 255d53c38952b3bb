//! The store's error type: one enum for the crate boundary, every variant saying what was
//! expected and what was found.

use std::path::PathBuf;

use crate::handle::Tier;
use crate::id::BlockId;
use crate::units::ByteCount;

/// A config (model preset or store config) that cannot be used, naming file, key and reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: key `{key}`: {reason}")]
pub struct ConfigError {
    /// The file (or `<embedded>/NAME` for built-in presets).
    pub file: String,
    /// Dotted path of the offending key.
    pub key: String,
    /// Why it was rejected.
    pub reason: String,
}

/// Everything the store can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A model preset or store config was rejected.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No preset with this name is loaded.
    #[error("unknown model `{name}` (known: {known})")]
    UnknownModel {
        /// Name asked for.
        name: String,
        /// Comma-separated known names.
        known: String,
    },
    /// The model is an accounting-only preset.
    #[error("model `{name}` is a {kind} preset for byte accounting only; kvfabric stores latent (mla) and hybrid blocks")]
    NotStorable {
        /// Preset name.
        name: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A payload's length does not match the geometry.
    #[error("payload length: expected {expected} bytes, found {found}")]
    PayloadLength {
        /// Length the geometry requires.
        expected: u64,
        /// Length given.
        found: u64,
    },
    /// A token count does not match the geometry's block size.
    #[error("token count: expected {expected} (the model's block size), found {found}")]
    TokenCount {
        /// Block tokens.
        expected: u32,
        /// Tokens given.
        found: u64,
    },
    /// A position beyond what the fabric rotates to.
    #[error("position {position} out of range (max {max})")]
    PositionOutOfRange {
        /// Position asked for.
        position: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A read or put at a position of a block whose RoPE dims cannot be rotated (the node
    /// answers 400); the block is still served exactly without a position.
    #[error("a position shift is not possible for this model: layer {layer}, region `{region}`: {reason}")]
    PositionShiftUnsupported {
        /// First layer that cannot be rotated.
        layer: u32,
        /// Its region (`indexer`, `rope`, ...).
        region: &'static str,
        /// Why.
        reason: String,
    },
    /// A block header failed to decode.
    #[error("block header: {0}")]
    Header(String),
    /// Bytes whose hash is not the id they were presented under.
    #[error("block {id}: bytes hash to {found}")]
    HashMismatch {
        /// Id expected.
        id: BlockId,
        /// What the bytes hash to.
        found: BlockId,
    },
    /// No such block (or no reference to it held by the caller).
    #[error("block {0} not found")]
    NotFound(BlockId),
    /// A slot handle that is stale (its block was dropped).
    #[error("slot {0} is not live")]
    StaleSlot(u64),
    /// Unpin or release without a matching pin or reference.
    #[error("block {id}: {what} count is already zero")]
    Underflow {
        /// The block.
        id: BlockId,
        /// `"pin"` or `"reference"`.
        what: &'static str,
    },
    /// Every tier is full of blocks that may not be evicted.
    #[error("no room for {needed}: every tier is full of pinned or referenced blocks")]
    Full {
        /// Bytes that needed a place.
        needed: ByteCount,
    },
    /// A block larger than a tier's largest region.
    #[error("{tier} tier: block of {len} exceeds the largest allocation ({max})")]
    TooLarge {
        /// The tier.
        tier: Tier,
        /// Block length.
        len: ByteCount,
        /// Largest allocation the tier can make.
        max: ByteCount,
    },
    /// A handle that does not belong to this tier or is no longer allocated.
    #[error("{tier} tier: invalid handle ({reason})")]
    InvalidHandle {
        /// The tier.
        tier: Tier,
        /// Why.
        reason: String,
    },
    /// A tier that cannot run here.
    #[error("{tier} tier unavailable: {reason}")]
    TierUnavailable {
        /// The tier.
        tier: Tier,
        /// Why (e.g. no CUDA driver).
        reason: String,
    },
    /// A disk-tier entry whose bytes do not match its id; quarantined, never served.
    #[error("disk entry for block {id} in {segment} at offset {offset} is corrupt: {reason}")]
    Corrupt {
        /// Block id recorded in the entry.
        id: BlockId,
        /// Segment file.
        segment: PathBuf,
        /// Byte offset of the entry.
        offset: u64,
        /// What failed.
        reason: String,
    },
    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What the store was doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A per-request arena refused a row or a drain.
    #[error(transparent)]
    Arena(#[from] crate::arena::ArenaError),
    /// A GPU driver error.
    #[error("gpu: {0}")]
    Gpu(String),
}

impl StoreError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> StoreError {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }
}
