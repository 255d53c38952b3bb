//! A linearizability checker for histories of register reads and writes (one register per
//! key), in the style of Wing & Gong with Lowe's memoization (as in Knossos and Porcupine).
//!
//! A test records every operation's invocation and completion time ([`HistoryRecorder`]) while
//! several clients write and read concurrently; [`check_registers`] then searches for a total
//! order that respects real time (an operation that completed before another was invoked comes
//! first) and register semantics (a read returns the last write before it). Linearizability is
//! compositional, so each key is checked alone.
//!
//! Operations whose outcome is unknown (a write that timed out) are pending: they may take
//! effect at any point after their invocation, or never. Reads that failed are dropped: they
//! observed nothing.
//!
//! Bounded: at most [`CheckLimits::ops_per_key_max`] operations per key (the search state is a
//! fixed-size bitset) and [`CheckLimits::states_max`] search states in all; past either bound
//! the verdict is [`Verdict::Unknown`], never a false "linearizable".

mod checker;
mod history;

pub use checker::{check_registers, CheckLimits, Verdict};
pub use history::{Call, History, HistoryRecorder, OpHandle, Operation, Ret};
