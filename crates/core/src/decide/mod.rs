//! The fabric's decisions as pure functions: no I/O, no clock, no randomness. Each takes the
//! state it decides on (and `now`, where time matters) as arguments and returns what to do;
//! the async drivers in [`crate::cluster`] gather that state, call these, and act.
//!
//! - [`liveness`]: whether a member counts as live at `now` (its directory lease).
//! - [`health`]: which members this node suspects dead from its own exchanges, and when to
//!   probe them.
//! - [`placement`]: the order in which members are asked for a new block's copies (suspects
//!   last).
//! - [`owners`]: the order in which a block's owners are tried for a read (suspects last), and
//!   what a read that found none tells its caller.
//! - [`repair`]: what one re-replication pass copies.
//! - [`drain`]: what a leaving member copies before it goes.
//! - [`score`]: the cost of serving a request on each candidate node (routes).

pub mod drain;
pub mod health;
pub mod liveness;
pub mod owners;
pub mod placement;
pub mod repair;
pub mod score;
