//! Identities the node takes from the crates that define them: [`NodeId`] from the
//! directory, [`ChunkKey`] from the store (one definition each).

pub use kvfabric_directory::NodeId;
pub use kvfabric_store::ChunkKey;
