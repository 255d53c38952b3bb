//! S3-FIFO (Yang et al., SOSP '23) over byte-sized entries.
//!
//! Three FIFO queues: `small` (probation, ~10% of the tier's bytes), `main`, and `ghost`
//! (ids only, recently evicted from `small`). New entries enter `small` unless they are in
//! `ghost`. Evicting from `small`: an entry hit since insertion moves to `main`, otherwise it
//! leaves (and is remembered in `ghost`). Evicting from `main`: an entry with a non-zero
//! counter is decremented and reinserted, otherwise it leaves. `small` is evicted from
//! while it holds at least its share of the bytes (or `main` is empty). Entries the caller refuses are
//! reinserted at the tail; every pass is bounded, so an all-pinned tier yields `None`.

use std::collections::{HashMap, HashSet, VecDeque};

use super::SlotId;

/// Highest value of the per-entry access counter (2 bits).
const FREQ_MAX: u8 = 3;
/// Share of the tier's bytes kept for the small queue, in percent.
const SMALL_PERCENT: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    queue: Queue,
    freq: u8,
    bytes: u64,
}

/// S3-FIFO eviction state for one tier.
#[derive(Debug, Clone)]
pub struct S3Fifo {
    capacity_bytes: u64,
    small: VecDeque<SlotId>,
    main: VecDeque<SlotId>,
    small_bytes: u64,
    meta: HashMap<SlotId, Meta>,
    ghost: VecDeque<SlotId>,
    ghost_set: HashSet<SlotId>,
    ghost_max: usize,
}

impl S3Fifo {
    /// A policy for a tier of `capacity_bytes`, remembering up to `ghost_max` evicted ids.
    pub fn new(capacity_bytes: u64, ghost_max: usize) -> S3Fifo {
        S3Fifo {
            capacity_bytes,
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_bytes: 0,
            meta: HashMap::new(),
            ghost: VecDeque::new(),
            ghost_set: HashSet::new(),
            ghost_max: ghost_max.max(1),
        }
    }

    /// Entries tracked.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Whether `slot` is tracked.
    pub fn contains(&self, slot: SlotId) -> bool {
        self.meta.contains_key(&slot)
    }

    /// Starts tracking `slot` of `bytes`; a ghost hit goes straight to `main`.
    pub fn insert(&mut self, slot: SlotId, bytes: u64) {
        if self.meta.contains_key(&slot) {
            return;
        }
        let queue = if self.ghost_set.remove(&slot) {
            Queue::Main
        } else {
            Queue::Small
        };
        self.meta.insert(
            slot,
            Meta {
                queue,
                freq: 0,
                bytes,
            },
        );
        match queue {
            Queue::Small => {
                self.small.push_back(slot);
                self.small_bytes += bytes;
            }
            Queue::Main => self.main.push_back(slot),
        }
    }

    /// Records a hit.
    pub fn touch(&mut self, slot: SlotId) {
        if let Some(m) = self.meta.get_mut(&slot) {
            m.freq = (m.freq + 1).min(FREQ_MAX);
        }
    }

    /// Stops tracking `slot` (deleted or moved away by the store). Queue entries are removed
    /// lazily.
    pub fn remove(&mut self, slot: SlotId) {
        if let Some(m) = self.meta.remove(&slot) {
            if m.queue == Queue::Small {
                self.small_bytes -= m.bytes;
            }
        }
    }

    /// Picks and stops tracking a victim among entries for which `evictable` is true.
    pub fn victim(&mut self, evictable: &mut dyn FnMut(SlotId) -> bool) -> Option<SlotId> {
        let small_over = self.small_bytes * 100 >= self.capacity_bytes * SMALL_PERCENT;
        if small_over || self.main.is_empty() {
            self.evict_small(evictable)
                .or_else(|| self.evict_main(evictable))
        } else {
            // evict_small may move hit entries into main: look there once more.
            self.evict_main(evictable)
                .or_else(|| self.evict_small(evictable))
                .or_else(|| self.evict_main(evictable))
        }
    }

    fn live_in(&self, slot: SlotId, queue: Queue) -> bool {
        self.meta.get(&slot).is_some_and(|m| m.queue == queue)
    }

    fn evict_small(&mut self, evictable: &mut dyn FnMut(SlotId) -> bool) -> Option<SlotId> {
        for _ in 0..self.small.len() {
            let slot = self.small.pop_front()?;
            if !self.live_in(slot, Queue::Small) {
                continue; // stale entry of a removed slot
            }
            let m = self.meta[&slot];
            if m.freq > 0 {
                self.small_bytes -= m.bytes;
                self.meta.insert(
                    slot,
                    Meta {
                        queue: Queue::Main,
                        freq: m.freq - 1,
                        bytes: m.bytes,
                    },
                );
                self.main.push_back(slot);
            } else if !evictable(slot) {
                self.small.push_back(slot);
            } else {
                self.remove(slot);
                self.remember(slot);
                return Some(slot);
            }
        }
        None
    }

    fn evict_main(&mut self, evictable: &mut dyn FnMut(SlotId) -> bool) -> Option<SlotId> {
        // Each entry is seen at most FREQ_MAX + 1 times before it is evicted or skipped.
        for _ in 0..self.main.len() * (FREQ_MAX as usize + 1) {
            let slot = self.main.pop_front()?;
            if !self.live_in(slot, Queue::Main) {
                continue;
            }
            let m = self.meta.get_mut(&slot).expect("live");
            if m.freq > 0 {
                m.freq -= 1;
                self.main.push_back(slot);
            } else if !evictable(slot) {
                self.main.push_back(slot);
            } else {
                self.remove(slot);
                return Some(slot);
            }
        }
        None
    }

    fn remember(&mut self, slot: SlotId) {
        if self.ghost_set.insert(slot) {
            self.ghost.push_back(slot);
        }
        while self.ghost.len() > self.ghost_max {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_hit_blocks_leave_before_shared_ones() {
        let mut p = S3Fifo::new(100, 100);
        // A shared block, hit repeatedly, then a scan of one-hit blocks.
        p.insert(SlotId(1), 10);
        p.touch(SlotId(1));
        p.touch(SlotId(1));
        for i in 2..12 {
            p.insert(SlotId(i), 10);
        }
        let mut victims = Vec::new();
        for _ in 0..10 {
            victims.push(p.victim(&mut |_| true).expect("victim").0);
        }
        assert!(
            !victims.contains(&1),
            "the shared block survived the scan: {victims:?}"
        );
        assert!(p.contains(SlotId(1)));
    }

    #[test]
    fn ghost_hit_enters_main() {
        let mut p = S3Fifo::new(100, 10);
        p.insert(SlotId(1), 50);
        assert_eq!(p.victim(&mut |_| true), Some(SlotId(1)));
        p.insert(SlotId(1), 50);
        assert_eq!(p.meta[&SlotId(1)].queue, Queue::Main);
    }

    #[test]
    fn all_refused_yields_none() {
        let mut p = S3Fifo::new(100, 10);
        for i in 0..20 {
            p.insert(SlotId(i), 10);
            p.touch(SlotId(i));
        }
        assert_eq!(p.victim(&mut |_| false), None);
        assert_eq!(p.len(), 20, "nothing was dropped");
    }

    proptest! {
        #[test]
        fn never_returns_refused_or_untracked(
            ops in proptest::collection::vec((0u8..4, 0u64..40), 1..400),
            pinned in proptest::collection::hash_set(0u64..40, 0..20),
        ) {
            let mut p = S3Fifo::new(400, 16);
            let mut tracked = std::collections::HashSet::new();
            for (op, s) in ops {
                let slot = SlotId(s);
                match op {
                    0 => { p.insert(slot, 1 + s % 7); tracked.insert(s); }
                    1 => p.touch(slot),
                    2 => { p.remove(slot); tracked.remove(&s); }
                    _ => {
                        if let Some(v) = p.victim(&mut |x| !pinned.contains(&x.0)) {
                            prop_assert!(!pinned.contains(&v.0), "evicted pinned {v:?}");
                            prop_assert!(tracked.remove(&v.0), "evicted untracked {v:?}");
                        } else {
                            prop_assert!(tracked.iter().all(|t| pinned.contains(t)),
                                "None while an evictable entry exists");
                        }
                    }
                }
                prop_assert_eq!(p.len(), tracked.len());
            }
        }
    }
}
