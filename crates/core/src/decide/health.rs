//! Peer health, as a pure state machine: which members this node suspects dead, from what
//! its own exchanges with them said, and when to probe them. No I/O and no clock: every call
//! takes `now_ms`.
//!
//! A member is suspected at once when an exchange with it gets no answer at all (a timeout, a
//! refused or lost connection — [`kvfabric_transport::TransportError::is_peer_unreachable`]),
//! not after a count of failures: one silent peer must not cost every following request its
//! own timeout. A suspect is then left out of placements and tried last by reads, and probed
//! in the background, first after `probe_ms` and then at doubling intervals up to
//! `probe_ms_max`; any answer from it (a probe's, or any other exchange's) clears it. A
//! member whose directory lease has expired is not live whatever its health says (see
//! [`super::liveness`]).

use std::collections::BTreeMap;

use crate::ids::NodeId;

/// One suspected member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspicion {
    /// When it was first suspected.
    pub since_ms: u64,
    /// When it is next due for a probe.
    pub probe_at_ms: u64,
    /// The current wait between probes.
    pub backoff_ms: u64,
}

/// What this node thinks of its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    suspects: BTreeMap<NodeId, Suspicion>,
    probe_ms: u64,
    probe_ms_max: u64,
}

impl Health {
    /// No suspects; probes after `probe_ms`, backing off to `probe_ms_max`.
    pub fn new(probe_ms: u64, probe_ms_max: u64) -> Health {
        Health {
            suspects: BTreeMap::new(),
            probe_ms: probe_ms.max(1),
            probe_ms_max: probe_ms_max.max(probe_ms.max(1)),
        }
    }

    /// An exchange with `peer` got no answer at `now_ms`: suspect it (a suspect's probe
    /// schedule is kept).
    pub fn failed(&mut self, peer: NodeId, now_ms: u64) {
        let probe_ms = self.probe_ms;
        self.suspects.entry(peer).or_insert(Suspicion {
            since_ms: now_ms,
            probe_at_ms: now_ms + probe_ms,
            backoff_ms: probe_ms,
        });
    }

    /// `peer` answered: it is healthy. `true` if it was suspected.
    pub fn answered(&mut self, peer: NodeId) -> bool {
        self.suspects.remove(&peer).is_some()
    }

    /// Whether `peer` is suspected.
    pub fn is_suspect(&self, peer: NodeId) -> bool {
        self.suspects.contains_key(&peer)
    }

    /// The suspects due for a probe at `now_ms`; each is scheduled for its next one (the
    /// wait doubled, up to `probe_ms_max`), so a caller that probes them all and reports
    /// the outcomes keeps the schedule.
    pub fn due(&mut self, now_ms: u64) -> Vec<NodeId> {
        let max = self.probe_ms_max;
        let mut due = Vec::new();
        for (peer, s) in self.suspects.iter_mut() {
            if s.probe_at_ms <= now_ms {
                s.backoff_ms = (s.backoff_ms * 2).min(max);
                s.probe_at_ms = now_ms + s.backoff_ms;
                due.push(*peer);
            }
        }
        due
    }

    /// The suspects, with their state.
    pub fn suspects(&self) -> impl Iterator<Item = (NodeId, &Suspicion)> + '_ {
        self.suspects.iter().map(|(p, s)| (*p, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_failure_suspects_an_answer_clears_and_probes_back_off() {
        let mut h = Health::new(100, 400);
        let p = NodeId(2);
        assert!(!h.is_suspect(p));
        h.failed(p, 1_000);
        assert!(h.is_suspect(p), "suspected at once");
        assert!(h.due(1_099).is_empty());
        assert_eq!(h.due(1_100), vec![p]);
        assert!(h.due(1_100).is_empty(), "rescheduled");
        assert!(h.due(1_299).is_empty());
        assert_eq!(h.due(1_300), vec![p], "200 ms later");
        assert_eq!(h.due(1_700), vec![p], "400 ms later");
        assert_eq!(h.due(2_100), vec![p], "capped at 400 ms");
        h.failed(p, 2_150);
        assert!(h.due(2_200).is_empty(), "a new failure keeps the schedule");
        assert!(h.answered(p));
        assert!(!h.is_suspect(p));
        assert!(!h.answered(p));
    }

    proptest! {
        /// Whatever the events, a peer is suspected exactly when its last event was a
        /// failure, and no probe is ever due before its time.
        #[test]
        fn suspicion_follows_the_last_event(events in proptest::collection::vec((0u64..4, any::<bool>(), 0u64..50), 1..60)) {
            let mut h = Health::new(10, 80);
            let mut last = BTreeMap::new();
            let mut now = 0u64;
            for (peer, ok, dt) in events {
                now += dt;
                let p = NodeId(peer);
                if ok { h.answered(p); } else { h.failed(p, now); }
                last.insert(p, ok);
                for d in h.due(now) {
                    prop_assert!(h.is_suspect(d));
                }
            }
            for (p, ok) in last {
                prop_assert_eq!(h.is_suspect(p), !ok);
            }
            for (_, s) in h.suspects() {
                prop_assert!(s.probe_at_ms > now || s.probe_at_ms >= s.since_ms);
                prop_assert!(s.backoff_ms <= 80);
            }
        }
    }
}
