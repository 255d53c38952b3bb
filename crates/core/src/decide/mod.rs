//! The fabric's decisions as pure functions: no I/O, no clock, no randomness. Each takes the
//! state it decides on (and `now`, where time matters) as arguments and returns what to do;
//! the async drivers in [`crate::cluster`] gather that state, call these, and act.
//!
//! - [`liveness`]: whether a member counts as live at `now` (its directory lease).
//! - [`placement`]: the order in which members are asked for a new block's copies.
//! - [`owners`]: the order in which a block's owners are tried for a read.
//! - [`repair`]: what one re-replication pass copies.
//! - [`drain`]: what a leaving member copies before it goes.
//! - [`score`]: the cost of serving a request on each candidate node (routes).

pub mod drain;
pub mod liveness;
pub mod owners;
pub mod placement;
pub mod repair;
pub mod score;
