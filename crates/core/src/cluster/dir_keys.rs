//! The keys this node files blocks under in the directory: every owner record and every
//! chunk mapping's target is keyed by the block's namespace as well as its id, so the
//! directory knows which namespace each block was put in.

use kvfabric_store::{BlockId, NamespaceKey};

/// Context of the mask [`directory_block`] derives from a namespace key.
const DIRECTORY_BLOCK_CONTEXT: &str = "kvfabric 2026-12 directory block key v1";

/// The directory's key for block `id` held under namespace `ns`: the id xor a mask derived
/// from the namespace key. The directory keys every owner record (and every chunk mapping's
/// target) by it, so it knows each block's namespace: the same id asked for under another
/// namespace names no record at all, exactly like an id nobody holds, and a miss never
/// reaches a peer for another tenant's block. A mask rather than a hash so that the node that
/// knows the namespace turns the key a chunk lookup returns back into the id
/// ([`block_of_directory`]); within one namespace it is a bijection (no new collisions).
pub(crate) fn directory_block(ns: &NamespaceKey, id: BlockId) -> BlockId {
    let mask = blake3::derive_key(DIRECTORY_BLOCK_CONTEXT, &ns.0);
    BlockId(std::array::from_fn(|i| id.0[i] ^ mask[i]))
}

/// The block id of a directory key under `ns` (the inverse of [`directory_block`]).
pub(crate) fn block_of_directory(ns: &NamespaceKey, key: BlockId) -> BlockId {
    directory_block(ns, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_per_namespace_and_turn_back_into_the_id() {
        let (a, b) = (NamespaceKey([1; 32]), NamespaceKey([2; 32]));
        let id = BlockId([7; 32]);
        let ka = directory_block(&a, id);
        assert_ne!(ka, id);
        assert_ne!(
            ka,
            directory_block(&b, id),
            "another namespace, another record"
        );
        assert_eq!(block_of_directory(&a, ka), id);
        assert_ne!(block_of_directory(&b, ka), id);
        let other = BlockId([8; 32]);
        assert_ne!(directory_block(&a, other), ka, "one namespace: a bijection");
    }
}
