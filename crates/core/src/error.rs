//! [`FabricError`]: every way a use-case of the core refuses or fails, one enum for the crate's
//! boundary. Each variant says what was expected and what was found; the node maps them onto
//! its HTTP statuses and codes.

use kvfabric_store::arena::ArenaError;
use kvfabric_store::{BlockId, StoreError};

use crate::local::LocalError;

/// Why a use-case of the fabric did not complete.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The store refused or failed (bad input such as an unknown model, a full store, a disk
    /// failure).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store call panicked while holding the lock; the store's state is not trusted since.
    #[error("the store lock is poisoned (a store call panicked); restart the node")]
    Poisoned,
    /// A put's body does not have the geometry's payload length.
    #[error("payload length: expected {expected} bytes, found {found}")]
    PayloadLength {
        /// The geometry's payload length.
        expected: u64,
        /// Bytes received (at least this many when the body ran past `expected`).
        found: u64,
    },
    /// The block-info log failed (at open).
    #[error("block-info log in {dir}: {reason}")]
    InfoLog {
        /// Its directory.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// A put's engine identity does not fit its block (checked before any byte is read).
    #[error("engine metadata: {0}")]
    EngineBlock(crate::events::engine::EngineBlockError),
    /// No block with this id is visible to the caller (absent, or another tenant's: the same
    /// answer either way).
    #[error("block not found")]
    NotFound,
    /// The block is visible to the caller (a shared namespace) but not theirs to delete.
    #[error("this caller may not delete from that namespace")]
    DeleteForbidden,
    /// Fewer verified copies than the replication factor exist within the bound (the ones
    /// that exist, this node's included, stay).
    #[error("{have} of {want} verified copies of block {block} exist; the local copy stays")]
    ReplicationIncomplete {
        /// The block.
        block: BlockId,
        /// Copies that exist.
        have: u32,
        /// Copies asked for.
        want: u32,
    },
    /// The block's directory records name live owners, but none of them served it (no
    /// answer within the bound, or an unusable one): it may well exist.
    #[error("block {block}: its owners ({}) did not answer", owners.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", "))]
    OwnersUnreachable {
        /// The block.
        block: BlockId,
        /// The owners tried that did not serve it.
        owners: Vec<crate::ids::NodeId>,
    },
    /// The directory could not record or answer (no leader or quorum within its bound).
    #[error("the directory did not answer: {0}")]
    DirectoryUnavailable(String),
    /// A stored block whose geometry is not among this node's presets (the models directory
    /// changed since it was sealed); it can be read canonically but not rotated.
    #[error("the block's geometry is not among this node's presets; read it without `position`")]
    UnknownGeometry,
    /// The namespace secret file could not be read, parsed or written.
    #[error("the namespace secret file {path}: {reason}")]
    SecretFile {
        /// The file.
        path: String,
        /// What was expected and found, or the I/O error.
        reason: String,
    },
    /// A rotation step of the namespace secret does not apply (the reason says which step
    /// comes first), or no random secret could be drawn.
    #[error("namespace secret: {0}")]
    SecretRotation(String),
    /// The event epoch file could not be read or advanced.
    #[error("the event epoch file {path}: {reason}")]
    EpochFile {
        /// The file.
        path: String,
        /// What was expected and found, or the I/O error.
        reason: String,
    },
    /// A per-request arena refused: its model, a layer, a row's length, a group's state, or
    /// the table's bounds (an unknown arena is [`FabricError::NotFound`]).
    #[error(transparent)]
    Arena(ArenaError),
    /// The arena is visible to the caller (a shared namespace) but not theirs to change.
    #[error("this caller may not change arenas of that namespace")]
    ArenaForbidden,
    /// The OS's random source failed (arena handles are drawn from it).
    #[error("random source: {0}")]
    Random(String),
    /// A route whose model was not named and could not be inferred.
    #[error("{0}")]
    ModelRequired(String),
    /// A membership change that is not allowed as asked (what and why).
    #[error("membership change refused: {0}")]
    MembershipRefused(String),
    /// A membership change that did not complete within its bound; what was done stays, and
    /// asking again resumes from there.
    #[error("membership change incomplete: {0}")]
    MembershipIncomplete(String),
}

impl From<ArenaError> for FabricError {
    fn from(e: ArenaError) -> FabricError {
        match e {
            // Ids are handles the table resolves first: a stale one is an absent arena.
            ArenaError::UnknownArena(_) => FabricError::NotFound,
            other => FabricError::Arena(other),
        }
    }
}

impl From<LocalError> for FabricError {
    fn from(e: LocalError) -> FabricError {
        match e {
            LocalError::Store(s) => FabricError::Store(s),
            LocalError::Poisoned => FabricError::Poisoned,
            LocalError::InfoLog { dir, reason } => FabricError::InfoLog { dir, reason },
        }
    }
}
