//! [`VerifiedBlock`]: block bytes that have been checked against their id.
//!
//! The only type that can be installed into a store or served. It can be built only by
//! hashing: [`VerifiedBlock::verify`] for whole buffers, [`VerifiedBlock::from_stream`] for
//! bytes hashed while they arrived, or by the store after sealing or a checked tier read.

use crate::error::StoreError;
use crate::id::{Blake3Ids, BlockId, IdHasher, NamespaceKey, StreamingId};

/// Block bytes (header ‖ payload) whose id has been checked.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifiedBlock {
    id: BlockId,
    namespace: NamespaceKey,
    bytes: Vec<u8>,
}

impl VerifiedBlock {
    /// Hashes `bytes` under `namespace`; only a match with `id` yields a block.
    pub fn verify(
        namespace: NamespaceKey,
        id: BlockId,
        bytes: Vec<u8>,
    ) -> Result<VerifiedBlock, StoreError> {
        let found = Blake3Ids.id(&namespace, &[&bytes]);
        if found != id {
            return Err(StoreError::HashMismatch { id, found });
        }
        Ok(VerifiedBlock {
            id,
            namespace,
            bytes,
        })
    }

    /// Accepts bytes that were fed to `hasher` as they arrived (no second pass).
    ///
    /// The caller must have fed exactly `bytes` to `hasher`, created with `namespace`.
    pub fn from_stream(
        namespace: NamespaceKey,
        id: BlockId,
        hasher: &StreamingId,
        bytes: Vec<u8>,
    ) -> Result<VerifiedBlock, StoreError> {
        let found = hasher.finalize();
        if found != id {
            return Err(StoreError::HashMismatch { id, found });
        }
        Ok(VerifiedBlock {
            id,
            namespace,
            bytes,
        })
    }

    /// Built by the store once its own hasher has checked the bytes.
    pub(crate) fn checked(id: BlockId, namespace: NamespaceKey, bytes: Vec<u8>) -> VerifiedBlock {
        VerifiedBlock {
            id,
            namespace,
            bytes,
        }
    }

    /// A block that was NOT checked: only for the chaos harness's planted "skip verification
    /// on receipt" bug (feature `planted-bugs`), which the checker must catch.
    #[cfg(feature = "planted-bugs")]
    pub fn planted_unverified(
        namespace: NamespaceKey,
        id: BlockId,
        bytes: Vec<u8>,
    ) -> VerifiedBlock {
        VerifiedBlock::checked(id, namespace, bytes)
    }

    /// The id the bytes hash to.
    pub fn id(&self) -> BlockId {
        self.id
    }

    /// The namespace the id was computed under.
    pub fn namespace(&self) -> NamespaceKey {
        self.namespace
    }

    /// Header ‖ payload.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The payload (bytes after the header).
    pub fn payload(&self) -> &[u8] {
        &self.bytes[crate::block::HEADER_LEN.min(self.bytes.len())..]
    }

    /// Gives the bytes up.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl std::fmt::Debug for VerifiedBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedBlock")
            .field("id", &self.id)
            .field("len", &self.bytes.len())
            .finish()
    }
}
