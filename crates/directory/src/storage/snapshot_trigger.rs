//! When to build a snapshot: once the records applied since the last one reach the size of
//! the state (and at least `snapshot_records_min`).
//!
//! A snapshot copies and encodes the whole state, so building one every fixed number of log
//! entries costs more per record as the directory grows (at a million records, every few
//! thousand entries). Tying it to the state's size keeps the log no longer than the state
//! it rebuilds and the snapshot work per applied record constant: a directory that grows to
//! N records builds snapshots at about min, 2·min, 4·min, … N. openraft's own
//! `snapshot_logs_since_last` policy still applies as a bound on log entries.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// Shared by the state machine (which counts), its snapshot builder (which resets) and the
/// member's task that asks Raft for a snapshot when told.
#[derive(Debug)]
pub struct SnapshotTrigger {
    records_min: u64,
    since: AtomicU64,
    due: Notify,
}

impl SnapshotTrigger {
    /// A trigger that fires no earlier than `records_min` records after the last snapshot.
    pub fn new(records_min: u64) -> SnapshotTrigger {
        SnapshotTrigger {
            records_min,
            since: AtomicU64::new(0),
            due: Notify::new(),
        }
    }

    /// Counts `applied` records; fires when the count reaches `max(records_min,
    /// state_records)`. Firing again before the snapshot is taken is harmless (one wake-up is
    /// kept, and Raft builds one snapshot at a time).
    pub(crate) fn applied(&self, applied: u64, state_records: u64) {
        let since = self.since.fetch_add(applied, Ordering::Relaxed) + applied;
        if applied > 0 && since >= self.records_min.max(state_records) {
            self.due.notify_one();
        }
    }

    /// A snapshot now covers everything applied: start counting again.
    pub(crate) fn reset(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    /// Records applied since the last snapshot.
    pub fn since(&self) -> u64 {
        self.since.load(Ordering::Relaxed)
    }

    /// Waits until a snapshot is due.
    pub async fn due(&self) {
        self.due.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_at_the_larger_of_the_floor_and_the_state() {
        let t = SnapshotTrigger::new(100);
        t.applied(60, 10);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), t.due())
                .await
                .is_err(),
            "60 records are under the floor of 100"
        );
        t.applied(60, 500);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), t.due())
                .await
                .is_err(),
            "120 records are under a state of 500"
        );
        t.applied(400, 500);
        tokio::time::timeout(std::time::Duration::from_millis(200), t.due())
            .await
            .expect("520 records reach a state of 500");
        t.reset();
        assert_eq!(t.since(), 0);
    }
}
