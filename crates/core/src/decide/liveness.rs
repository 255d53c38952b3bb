//! Whether a member counts as live: its record in the directory says it joined and has not
//! expired, and its lease runs past `now_ms` (both read from this node's replica).

use kvfabric_directory::{Liveness, NodeRecord};

/// Whether the member with `record` is live at `now_ms`.
pub fn is_live(record: Option<&NodeRecord>, now_ms: u64) -> bool {
    record.is_some_and(|r| r.liveness == Liveness::Live && r.lease_until_ms > now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_directory::Epoch;

    fn record(liveness: Liveness, lease_until_ms: u64) -> NodeRecord {
        NodeRecord {
            epoch: Epoch(1),
            lease_until_ms,
            liveness,
        }
    }

    #[test]
    fn a_member_is_live_only_while_its_lease_runs() {
        assert!(is_live(Some(&record(Liveness::Live, 1_001)), 1_000));
        assert!(!is_live(Some(&record(Liveness::Live, 1_000)), 1_000));
        assert!(!is_live(Some(&record(Liveness::Expired, 9_999)), 1_000));
        assert!(!is_live(None, 1_000));
    }
}
