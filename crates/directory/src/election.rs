//! Prompt elections: a voter that stops hearing its leader stands for election once the
//! leader's lease has run out, instead of waiting out openraft 0.9's own timer.
//!
//! Why: openraft's timer waits the lease (`election_timeout_max_ms`), then the member's
//! election timeout (drawn once, at start), then — when the member has ever seen a longer
//! log than its own in a vote it asked for — twice the maximum again, and that flag is only
//! cleared by the member's next campaign. On a busy cluster every member ends up flagged, and
//! a leader's loss costs 1.3–1.6 s of writes where 0.5 s would do (measured: the 30-minute
//! chaos run's pause and isolate_leader faults).
//!
//! What it does instead, from three signals the RPC seam sees ([`ElectionSignals`]):
//! - **contact**: the last AppendEntries this member accepted, or the last vote it granted
//!   (as openraft does, a granted vote gives the candidate a lease's time to heartbeat);
//! - **defer**: a vote it asked for was refused by a member holding a longer log, so it
//!   stands aside for twice the lease (that member should win, as openraft intends);
//! - **urge**: it refused a candidate whose log is shorter than its own, or its campaign lost
//!   a tie to a rival whose log is no longer than its own: it should stand now.
//!
//! The decision ([`due`]) is pure: a voter that is not the leader, whose contact is older
//! than the lease and who is not deferring stands when urged (within a lease of the urge),
//! else once its contact is older
//! than the lease plus a fresh random jitter (below half `election_timeout_min_ms`, so before
//! openraft's own timer) and its last campaign is older than the retry spacing
//! (`election_timeout_min_ms` plus such a jitter). The
//! watchdog ([`spawn_watchdog`]) samples Raft's metrics every half heartbeat and, once a
//! majority of the voters grant it a pre-vote ([`crate::prevote`]), calls
//! `trigger().elect()` (openraft's own timer is off on such a member). Voters still refuse a
//! candidate while their own lease from a live leader runs, and a member that has just
//! stepped down, or was itself stopped for longer than a lease, counts that moment as
//! contact, so a prompt election does not unseat a leader the majority hears.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use openraft::raft::{AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft::ServerState;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::directory::Inner;
use crate::ids::NodeId;

/// What the RPC seam has seen that bears on standing for election. Shared by a member's RPC
/// client, its RPC server and its watchdog.
#[derive(Debug)]
pub(crate) struct ElectionSignals {
    state: Mutex<Signals>,
    /// Elections this member started through [`spawn_watchdog`].
    pub(crate) prompted: AtomicU64,
    /// Rounds of pre-votes ([`crate::prevote`]) a majority did not grant.
    pub(crate) prevotes_refused: AtomicU64,
}

/// The signals at one moment (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Signals {
    /// The last leader contact (AppendEntries accepted, vote granted), or the start.
    pub(crate) contact: Instant,
    /// Stand aside until then: a longer log refused this member's campaign.
    pub(crate) defer_until: Option<Instant>,
    /// When this member was last urged to stand.
    pub(crate) urged: Option<Instant>,
}

impl ElectionSignals {
    pub(crate) fn new(now: Instant) -> ElectionSignals {
        ElectionSignals {
            state: Mutex::new(Signals {
                contact: now,
                defer_until: None,
                urged: None,
            }),
            prompted: AtomicU64::new(0),
            prevotes_refused: AtomicU64::new(0),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Signals) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn snapshot(&self) -> Signals {
        self.with(|s| *s)
    }

    /// Counts `now` as contact: the member just stepped down, or was itself stalled and
    /// cannot tell whether its leader spoke meanwhile.
    pub(crate) fn touch(&self, now: Instant) {
        self.with(|s| s.contact = s.contact.max(now));
    }

    /// This member answered an AppendEntries: a leader it accepts is alive (one it refused
    /// for a stale term is not contact).
    pub(crate) fn appended(&self, resp: &AppendEntriesResponse<NodeId>) {
        if !matches!(resp, AppendEntriesResponse::HigherVote(_)) {
            let now = Instant::now();
            self.with(|s| s.contact = now);
        }
    }

    /// This member answered a vote request.
    pub(crate) fn voted(&self, req: &VoteRequest<NodeId>, resp: &VoteResponse<NodeId>) {
        let now = Instant::now();
        if resp.vote_granted {
            self.with(|s| s.contact = now);
        } else if resp.last_log_id > req.last_log_id {
            // A candidate with a shorter log: the member holding the longer one should stand.
            self.with(|s| s.urged = Some(now));
        }
    }

    /// A vote this member asked for was answered; `lease` is the leader lease.
    pub(crate) fn vote_answered(
        &self,
        req: &VoteRequest<NodeId>,
        resp: &VoteResponse<NodeId>,
        lease: Duration,
    ) {
        if resp.vote_granted {
            return;
        }
        let now = Instant::now();
        if resp.last_log_id > req.last_log_id {
            self.with(|s| s.defer_until = Some(now + 2 * lease));
        } else if resp.vote > req.vote {
            // A rival candidacy won the tie; this member's log is no shorter: stand again.
            self.with(|s| s.urged = Some(now));
        }
    }
}

/// How a member's Raft stands, as the watchdog reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Leads: never stands.
    Leader,
    /// A voter that follows or campaigns.
    Voter,
    /// A learner, or shutting down: never stands.
    Other,
}

/// The watchdog's timing, from the directory config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The leader lease (openraft 0.9: `election_timeout_max_ms`).
    pub(crate) lease: Duration,
    /// The jitter added to the lease, drawn afresh after each campaign.
    pub(crate) jitter: Duration,
    /// The least spacing between two campaigns of this member (jitter included).
    pub(crate) retry: Duration,
}

/// Whether the member should stand for election at `now`, given its role, the signals and
/// its last prompted campaign.
pub(crate) fn due(
    now: Instant,
    role: Role,
    s: &Signals,
    last: Option<Instant>,
    t: &Timing,
) -> bool {
    if role != Role::Voter {
        return false;
    }
    let quiet = now.saturating_duration_since(s.contact);
    if quiet < t.lease || s.defer_until.is_some_and(|d| now < d) {
        return false;
    }
    let rested = last.is_none_or(|l| now.saturating_duration_since(l) >= t.retry);
    urge_fresh(now, s, last, t.lease) || (quiet >= t.lease + t.jitter && rested)
}

/// Whether the member holds an urge to act on: one that came after its last prompted
/// campaign and within a lease of `now` (an older one, say a candidate refused while this
/// member still heard its leader, says nothing about the election at hand).
fn urge_fresh(now: Instant, s: &Signals, last: Option<Instant>, lease: Duration) -> bool {
    s.urged
        .is_some_and(|u| last.is_none_or(|l| u > l) && now.saturating_duration_since(u) <= lease)
}

/// Whether the watchdog counts `now` as contact: the member has stepped down since the last
/// sample (`was_leader`), or the last sample is more than a lease ago (its own process stood
/// still, so it cannot tell whether the leader spoke meanwhile).
pub(crate) fn resets_the_wait(
    now: Instant,
    prev_sample: Instant,
    lease: Duration,
    was_leader: bool,
    role: Role,
) -> bool {
    now.saturating_duration_since(prev_sample) > lease || (was_leader && role != Role::Leader)
}

/// A jitter in `[0, max)`, from the member id, a counter and the wall clock.
fn jitter(id: NodeId, n: u64, max: Duration) -> Duration {
    let ms = max.as_millis() as u64;
    if ms == 0 {
        return Duration::ZERO;
    }
    let mut h = blake3::Hasher::new();
    h.update(&id.0.to_le_bytes());
    h.update(&n.to_le_bytes());
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    h.update(&wall.to_le_bytes());
    let b = h.finalize();
    let mut x = [0u8; 8];
    x.copy_from_slice(&b.as_bytes()[..8]);
    Duration::from_millis(u64::from_le_bytes(x) % ms)
}

/// Samples the member's Raft every half heartbeat and stands for election when [`due`].
pub(crate) fn spawn_watchdog(
    inner: Weak<Inner>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some((id, c)) = inner.upgrade().map(|i| (i.id, i.config.clone())) else {
            return;
        };
        let period = Duration::from_millis((c.heartbeat_interval_ms / 2).max(1));
        let lease = Duration::from_millis(c.election_timeout_max_ms);
        let min = Duration::from_millis(c.election_timeout_min_ms);
        // Jitter below half the least election timeout: with the sampling period (half a
        // heartbeat, at most a quarter of it) the watchdog stands before openraft's own timer
        // (lease + election timeout) could.
        let draw = |n: u64| Timing {
            lease,
            jitter: jitter(id, 2 * n, min / 2),
            retry: min + jitter(id, 2 * n + 1, min / 2),
        };
        let mut campaigns = 0u64;
        let mut timing = draw(campaigns);
        let mut last: Option<Instant> = None;
        let mut was_leader = false;
        let mut prev_tick = Instant::now();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let Some(inner) = inner.upgrade() else { return };
            let role = {
                let m = inner.raft.metrics();
                let m = m.borrow();
                let voter = m
                    .membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == id);
                match m.state {
                    ServerState::Leader => Role::Leader,
                    ServerState::Follower | ServerState::Candidate if voter => Role::Voter,
                    _ => Role::Other,
                }
            };
            let now = Instant::now();
            // A member that steps down, or whose own process stood still past a lease (a
            // stopped process, a stalled host), gives the leader a lease to reach it first:
            // standing at once would unseat a leader the others hear.
            if resets_the_wait(now, prev_tick, lease, was_leader, role) {
                inner.election.touch(now);
            }
            prev_tick = now;
            was_leader = role == Role::Leader;
            let signals = inner.election.snapshot();
            if !due(now, role, &signals, last, &timing) {
                continue;
            }
            let quiet_ms = now.saturating_duration_since(signals.contact).as_millis() as u64;
            let urged = urge_fresh(now, &signals, last, lease);
            // The others must have lost the leader too (a pre-vote changes nothing).
            let round = crate::prevote::ask(&inner, min).await;
            campaigns += 1;
            timing = draw(campaigns);
            last = Some(now);
            if !round.won() {
                tracing::info!(
                    member = %id,
                    quiet_ms,
                    granted = round.granted,
                    voters = round.voters,
                    "no word from a leader, but the other voters still hear one: not standing"
                );
                continue;
            }
            tracing::info!(
                member = %id,
                quiet_ms,
                urged,
                granted = round.granted,
                "no word from a leader for its lease; standing for election"
            );
            if inner.raft.trigger().elect().await.is_err() {
                return;
            }
            inner.election.prompted.fetch_add(1, Ordering::Relaxed);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        lease: Duration::from_millis(350),
        jitter: Duration::from_millis(100),
        retry: Duration::from_millis(300),
    };

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    fn quiet_since(start: Instant) -> Signals {
        Signals {
            contact: start,
            defer_until: None,
            urged: None,
        }
    }

    #[test]
    fn a_voter_stands_once_the_lease_and_its_jitter_have_passed() {
        let s0 = Instant::now();
        let s = quiet_since(s0);
        assert!(!due(at(s0, 349), Role::Voter, &s, None, &T));
        assert!(!due(at(s0, 449), Role::Voter, &s, None, &T));
        assert!(due(at(s0, 450), Role::Voter, &s, None, &T));
    }

    #[test]
    fn a_leader_or_a_learner_never_stands() {
        let s0 = Instant::now();
        let s = quiet_since(s0);
        for role in [Role::Leader, Role::Other] {
            assert!(!due(at(s0, 10_000), role, &s, None, &T), "{role:?}");
        }
    }

    #[test]
    fn campaigns_are_spaced_by_the_retry_unless_urged() {
        let s0 = Instant::now();
        let mut s = quiet_since(s0);
        let last = Some(at(s0, 500));
        assert!(!due(at(s0, 799), Role::Voter, &s, last, &T));
        assert!(due(at(s0, 800), Role::Voter, &s, last, &T));
        // Urged after the last campaign: at once. Urged before it: spent.
        s.urged = Some(at(s0, 510));
        assert!(due(at(s0, 520), Role::Voter, &s, last, &T));
        s.urged = Some(at(s0, 490));
        assert!(!due(at(s0, 520), Role::Voter, &s, last, &T));
    }

    #[test]
    fn an_urge_waits_for_the_lease_and_a_deferral_overrides_it() {
        let s0 = Instant::now();
        let mut s = quiet_since(s0);
        s.urged = Some(at(s0, 100));
        assert!(
            !due(at(s0, 200), Role::Voter, &s, None, &T),
            "lease not run out"
        );
        assert!(due(at(s0, 350), Role::Voter, &s, None, &T));
        s.defer_until = Some(at(s0, 1_000));
        assert!(!due(at(s0, 999), Role::Voter, &s, None, &T));
        assert!(due(at(s0, 1_000), Role::Voter, &s, None, &T));
        // An urge older than a lease is spent.
        let long = Timing {
            jitter: Duration::from_millis(500),
            ..T
        };
        s.defer_until = None;
        assert!(due(at(s0, 450), Role::Voter, &s, None, &long));
        assert!(!due(at(s0, 451), Role::Voter, &s, None, &long));
    }

    #[test]
    fn stepping_down_or_a_stall_restarts_the_wait() {
        let s0 = Instant::now();
        let lease = T.lease;
        assert!(!resets_the_wait(at(s0, 50), s0, lease, false, Role::Voter));
        assert!(!resets_the_wait(at(s0, 50), s0, lease, true, Role::Leader));
        assert!(resets_the_wait(at(s0, 50), s0, lease, true, Role::Voter));
        assert!(resets_the_wait(at(s0, 351), s0, lease, false, Role::Voter));
        // A touch never moves contact back.
        let sig = ElectionSignals::new(at(s0, 500));
        sig.touch(at(s0, 400));
        assert_eq!(sig.snapshot().contact, at(s0, 500));
        sig.touch(at(s0, 600));
        assert_eq!(sig.snapshot().contact, at(s0, 600));
    }

    #[test]
    fn contact_restarts_the_wait() {
        let s0 = Instant::now();
        let mut s = quiet_since(s0);
        s.contact = at(s0, 400);
        assert!(!due(at(s0, 600), Role::Voter, &s, None, &T));
        assert!(due(at(s0, 850), Role::Voter, &s, None, &T));
    }

    #[test]
    fn signals_follow_what_the_rpcs_said() {
        use openraft::{LogId, Vote};
        let sig = ElectionSignals::new(Instant::now());
        let log = |term, index| {
            Some(LogId::new(
                openraft::CommittedLeaderId::new(term, NodeId(1)),
                index,
            ))
        };
        let req = VoteRequest::new(Vote::new(5, NodeId(2)), log(4, 10));
        // Refused by a longer log: defer. Refused by a higher vote with a shorter log: urged.
        let longer = VoteResponse::new(Vote::new(4, NodeId(1)), log(4, 11), false);
        sig.vote_answered(&req, &longer, Duration::from_millis(350));
        let s = sig.snapshot();
        assert!(s.defer_until.is_some() && s.urged.is_none());
        let rival = VoteResponse::new(Vote::new(5, NodeId(3)), log(4, 9), false);
        sig.vote_answered(&req, &rival, Duration::from_millis(350));
        assert!(sig.snapshot().urged.is_some());
        // As a voter: refusing a shorter log urges; granting is contact.
        let sig = ElectionSignals::new(Instant::now());
        sig.voted(&req, &longer);
        assert!(sig.snapshot().urged.is_some());
        let before = sig.snapshot().contact;
        std::thread::sleep(Duration::from_millis(2));
        sig.voted(
            &req,
            &VoteResponse::new(Vote::new(5, NodeId(2)), log(4, 10), true),
        );
        assert!(sig.snapshot().contact > before);
    }
}
