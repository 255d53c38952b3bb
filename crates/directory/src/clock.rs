//! Time for leases, behind a trait: wall-clock milliseconds in production, a manual clock in
//! tests so that lease expiry happens exactly when a test says.
//!
//! Only the lease logic reads this clock (the leader, when it proposes `ExpireLeases`, and a
//! node, when it computes the end of its lease). Raft's own timers (heartbeats, elections) run on
//! tokio's clock and are not affected.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of milliseconds. Lease deadlines from different nodes are compared, so production
/// clocks must agree to well within `lease_ms` (NTP-synchronised wall clocks do).
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since an epoch shared by every node of the cluster.
    fn now_ms(&self) -> u64;
}

/// Unix time in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock {
            now_ms: AtomicU64::new(start_ms),
        }
    }

    /// Moves the clock forward by `ms`; returns the new reading.
    pub fn advance(&self, ms: u64) -> u64 {
        self.now_ms.fetch_add(ms, Ordering::SeqCst) + ms
    }

    /// Sets the reading.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
