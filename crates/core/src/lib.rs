//! kvfabric's fabric core: the use-cases of a node, without HTTP.
//!
//! Owns: [`Fabric`], the one type whose methods are the node's use-cases (put, get, head,
//! delete, lookup, route, the per-request arenas of hybrid models) and views ([`fabric`]); the local side — the tiered store with what
//! this node holds and the chunk keys put on it ([`local`]); the node's KV event log
//! ([`events`]); the cluster side — membership and leases, live membership changes (add,
//! drain, remove), replication, cross-node gets, re-replication, tier sync, the control
//! protocol, the Raft network and the measured bandwidths ([`cluster`]: async drivers); the
//! decisions they act on as pure functions of `now` and state — liveness, peer health,
//! replica placement, owner ranking, repair and drain plans, route scores ([`decide`]); the
//! model catalog ([`presets`]); the cluster's namespace secret file and its rotation
//! ([`secret`]); the validated configuration it runs with ([`config`]); its error
//! ([`error`]); and a harness of several fabrics in one process over in-memory networks and a
//! manual clock, for deterministic multi-node tests ([`testing`]).
//!
//! Must never: know about HTTP (callers map [`FabricError`] onto their answers); serve bytes
//! that the store has not verified against the id asked for; let one tenant read, look up or
//! detect another tenant's blocks; hold the store lock across network I/O; acknowledge a put
//! before the copies it reports exist.

pub mod cluster;
pub mod config;
pub mod decide;
pub mod error;
pub mod events;
pub mod fabric;
pub mod ids;
pub mod local;
pub mod presets;
pub mod secret;
pub mod testing;

pub use error::FabricError;
pub use fabric::{Fabric, FabricParts};
pub use ids::{ChunkKey, NodeId};
pub use kvfabric_directory::{Clock, ManualClock, ReadConsistency, SystemClock};

/// The namespace of a node with no tenancy configured (every caller reads and writes it).
pub const OPEN_NAMESPACE: &str = "default";
