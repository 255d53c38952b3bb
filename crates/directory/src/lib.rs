//! kvfabric's directory: the Raft-replicated map of content hashes to owners.
//!
//! Will own the openraft state machine (`BlockId → owners`, `ChunkKey → BlockId`, membership
//! and leases), its persistence and its network (issue 4). Nothing is implemented yet: this
//! crate currently only fixes its place in the workspace (node → directory → store).
