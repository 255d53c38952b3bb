//! The log's in-memory tail: entries appended but not yet on disk, and the most recent durable
//! ones, so that replication and apply read fresh entries without touching the disk.
//!
//! The tail is always one contiguous run of indices `[first, last]`. Below `first` every entry
//! is in the WAL (only durable entries are ever evicted, oldest first); at and above `first` the
//! tail is the truth (an appended entry is staged here before its write is synced, which is
//! what lets `append` return before the fsync, as openraft's storage contract allows).

use std::collections::BTreeMap;
use std::ops::RangeBounds;

use crate::type_config::{Entry, LogId};

/// Durable entries kept after their commit, for readers that lag a little.
pub(super) const TAIL_DURABLE_MAX: usize = 256;

#[derive(Debug)]
struct Slot {
    entry: Entry,
    durable: bool,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct LogTail {
    slots: BTreeMap<u64, Slot>,
    durable: usize,
}

impl LogTail {
    /// Stages entries that are about to be written. They must continue the tail (or start a
    /// new one when it is empty): openraft never appends with a hole.
    pub(super) fn stage(&mut self, entries: &[Entry]) -> Result<(), String> {
        for e in entries {
            let index = e.log_id.index;
            if let Some(last) = self.last_index() {
                if index != last + 1 {
                    return Err(format!(
                        "append at index {} expected, found {index}",
                        last + 1
                    ));
                }
            }
            self.slots.insert(
                index,
                Slot {
                    entry: e.clone(),
                    durable: false,
                },
            );
        }
        Ok(())
    }

    /// Marks entries durable after their write was synced (only those still holding the
    /// same log id: a truncation may have dropped them), then evicts the oldest durable ones
    /// beyond [`TAIL_DURABLE_MAX`].
    pub(super) fn mark_durable(&mut self, written: &[LogId]) {
        for id in written {
            if let Some(slot) = self.slots.get_mut(&id.index) {
                if slot.entry.log_id == *id && !slot.durable {
                    slot.durable = true;
                    self.durable += 1;
                }
            }
        }
        while self.durable > TAIL_DURABLE_MAX {
            match self.slots.first_entry() {
                Some(first) if first.get().durable => {
                    first.remove();
                    self.durable -= 1;
                }
                // Entries are made durable in index order, so a staged one at the front means
                // nothing behind it is durable either.
                _ => break,
            }
        }
    }

    /// Drops every entry at or above `from` (a follower's conflicting suffix).
    pub(super) fn truncate(&mut self, from: u64) {
        let dropped = self.slots.split_off(&from);
        self.durable -= dropped.values().filter(|s| s.durable).count();
    }

    /// Drops every entry at or below `upto` (purged behind a snapshot).
    pub(super) fn purge(&mut self, upto: u64) {
        let kept = self.slots.split_off(&(upto + 1));
        let dropped = std::mem::replace(&mut self.slots, kept);
        self.durable -= dropped.values().filter(|s| s.durable).count();
    }

    /// The lowest index held, if any.
    pub(super) fn first_index(&self) -> Option<u64> {
        self.slots.keys().next().copied()
    }

    fn last_index(&self) -> Option<u64> {
        self.slots.keys().next_back().copied()
    }

    /// The newest entry's log id, if any.
    pub(super) fn last_log_id(&self) -> Option<LogId> {
        self.slots.values().next_back().map(|s| s.entry.log_id)
    }

    /// Clones of the held entries in `range`, in index order.
    pub(super) fn read(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        self.slots
            .range(range)
            .map(|(_, s)| s.entry.clone())
            .collect()
    }

    /// Entries held (durable or not).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::ids::NodeId;

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, NodeId(1)), index),
            payload: EntryPayload::Blank,
        }
    }

    fn ids(entries: &[Entry]) -> Vec<LogId> {
        entries.iter().map(|e| e.log_id).collect()
    }

    #[test]
    fn staging_refuses_a_hole() {
        let mut t = LogTail::default();
        t.stage(&[entry(1, 5), entry(1, 6)]).unwrap();
        let err = t.stage(&[entry(1, 8)]).unwrap_err();
        assert_eq!(err, "append at index 7 expected, found 8");
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn only_durable_entries_are_evicted_oldest_first() {
        let mut t = LogTail::default();
        let n = TAIL_DURABLE_MAX as u64 + 10;
        let all: Vec<Entry> = (1..=n).map(|i| entry(1, i)).collect();
        t.stage(&all).unwrap();
        // Nothing durable yet: everything stays, however long the tail.
        t.mark_durable(&[]);
        assert_eq!(t.len(), n as usize);
        t.mark_durable(&ids(&all[..20]));
        assert_eq!(t.len(), n as usize, "20 durable entries are under the cap");
        t.mark_durable(&ids(&all[20..]));
        assert_eq!(t.len(), TAIL_DURABLE_MAX);
        assert_eq!(t.first_index(), Some(11));
        assert_eq!(t.last_log_id(), Some(all[n as usize - 1].log_id));
    }

    #[test]
    fn truncation_drops_the_suffix_and_stale_durability_marks_are_ignored() {
        let mut t = LogTail::default();
        let old: Vec<Entry> = (1..=4).map(|i| entry(1, i)).collect();
        t.stage(&old).unwrap();
        t.truncate(3);
        t.stage(&[entry(2, 3)]).unwrap();
        // The write of the old entry 3 is synced after the truncation: the new
        // entry 3 must stay staged.
        t.mark_durable(&ids(&old));
        assert_eq!(t.read(3..).len(), 1);
        assert_eq!(t.read(3..)[0].log_id, entry(2, 3).log_id);
        assert_eq!(t.durable, 2);
        t.mark_durable(&[entry(2, 3).log_id]);
        assert_eq!(t.durable, 3);
    }

    #[test]
    fn purge_drops_the_prefix() {
        let mut t = LogTail::default();
        let all: Vec<Entry> = (1..=6).map(|i| entry(1, i)).collect();
        t.stage(&all).unwrap();
        t.mark_durable(&ids(&all[..3]));
        t.purge(4);
        assert_eq!(t.first_index(), Some(5));
        assert_eq!(t.durable, 0);
        assert_eq!(ids(&t.read(..)), ids(&all[4..]));
    }
}
