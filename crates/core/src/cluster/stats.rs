//! [`MemberStats`]: a member's cumulative counters as the operator's dashboard shows them
//! (reads by tier, fetched from peers and not found, puts by dedup outcome, verification failures on both sides of a
//! transfer, collisions, fetches), taken from its store and its block transport and carried
//! to other members in the control channel's `Usage` answer. Rates are the dashboard's
//! business: it differentiates successive readings.

use serde::{Deserialize, Serialize};

use crate::local::Snapshot;
use kvfabric_transport::CountersSnapshot;

/// A member's counters since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStats {
    /// Reads served from each tier: gpu, host, disk.
    pub hits: [u64; 3],
    /// Reads answered not found (no copy on the member, none fetched from a peer).
    pub not_found: u64,
    /// Puts that stored new content.
    pub puts_new: u64,
    /// Puts that matched stored bytes and shared them.
    pub puts_shared: u64,
    /// Seals whose id matched different stored bytes (a security signal).
    pub dedup_collisions: u64,
    /// Tier reads whose bytes did not match their id (never served).
    pub verify_failures: u64,
    /// Disk entries quarantined.
    pub quarantined: u64,
    /// Blocks fetched from other members and verified.
    pub fetches_ok: u64,
    /// Fetches from another member that failed.
    pub fetches_failed: u64,
    /// Blocks received from other members that did not hash to their id (refused).
    pub receipt_verify_failures: u64,
    /// Block bytes received over the transport.
    pub transport_bytes_in: u64,
    /// Block bytes sent over the transport.
    pub transport_bytes_out: u64,
    /// Blocks held.
    pub held_blocks: u64,
}

impl MemberStats {
    /// From a store snapshot, the reads answered not found and, on a cluster member, its
    /// transport's counters.
    pub fn of(
        snapshot: &Snapshot,
        not_found: u64,
        transport: Option<&CountersSnapshot>,
    ) -> MemberStats {
        let c = &snapshot.counters;
        let t = transport.cloned().unwrap_or_default();
        MemberStats {
            hits: c.hits,
            not_found,
            puts_new: c.seals_new,
            puts_shared: c.seals_shared,
            dedup_collisions: c.dedup_collisions,
            verify_failures: c.verify_failures,
            quarantined: c.disk.quarantined,
            fetches_ok: t.fetches_ok,
            fetches_failed: t.fetches_failed,
            receipt_verify_failures: t.verify_failures,
            transport_bytes_in: t.bytes_in,
            transport_bytes_out: t.bytes_out,
            held_blocks: snapshot.held,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_store::StoreCounters;

    #[test]
    fn stats_take_the_store_and_transport_counters_they_name() {
        let mut counters = StoreCounters {
            hits: [1, 2, 3],
            seals_new: 5,
            seals_shared: 6,
            dedup_collisions: 7,
            verify_failures: 8,
            ..StoreCounters::default()
        };
        counters.disk.quarantined = 9;
        let snapshot = Snapshot {
            counters,
            usage: Vec::new(),
            held: 10,
            chunk_keys: 0,
            scrub: [0; 5],
        };
        let t = CountersSnapshot {
            fetches_ok: 11,
            fetches_failed: 12,
            verify_failures: 13,
            bytes_in: 14,
            bytes_out: 15,
            ..CountersSnapshot::default()
        };
        let s = MemberStats::of(&snapshot, 4, Some(&t));
        assert_eq!(
            (
                s.hits,
                s.not_found,
                s.puts_new,
                s.puts_shared,
                s.dedup_collisions
            ),
            ([1, 2, 3], 4, 5, 6, 7)
        );
        assert_eq!(
            (s.verify_failures, s.quarantined, s.held_blocks),
            (8, 9, 10)
        );
        assert_eq!(
            (
                s.fetches_ok,
                s.fetches_failed,
                s.receipt_verify_failures,
                s.transport_bytes_in,
                s.transport_bytes_out
            ),
            (11, 12, 13, 14, 15)
        );
        let alone = MemberStats::of(&snapshot, 0, None);
        assert_eq!((alone.fetches_ok, alone.hits), (0, [1, 2, 3]));
        let back: MemberStats = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
