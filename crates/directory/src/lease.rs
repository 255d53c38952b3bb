//! The leader's lease ticker: proposes `ExpireLeases` from the clock when a lease has run out.
//!
//! Every member runs the ticker; only the one that believes it leads proposes, and only when
//! its applied state shows an expired lease, so an idle cluster writes nothing. A deposed
//! leader's proposal fails (it cannot commit), and a duplicate is harmless: expiry is
//! idempotent.
//!
//! **Grace after a gap.** While no leader could commit (an election that took long, a leader
//! that lost touch with its voters), no node could renew, so leases that ran out in the gap
//! say nothing about the nodes. The ticker therefore proposes nothing until it has led, in
//! touch with a quorum, for [`DirectoryConfig::lease_grace_ms`] (half a lease) in its current
//! term: time for every live node to renew (nodes renew at least every half lease). etcd's
//! lessor does the same on a promotion (it refreshes every lease). The grace counts from when
//! the leadership began (openraft's server metrics wake the ticker) or, for a leader that was
//! out of touch, from when it was back. A leader is out of touch while a quorum's last
//! acknowledgement is older than `election_timeout_max_ms` (openraft's
//! `millis_since_quorum_ack`), or when it has had none that long after it began to lead. A
//! shorter silence cannot cost a live node its lease: what a lease has left after a renewal
//! (at least half) is longer than two election timeouts (the config's validation).
//!
//! The cost: a node that died just before a long gap is expired up to half a lease later
//! than its lease said; after a prompt failover (a second or two) nothing changes, since
//! every lease then still has more than half of itself left.
//!
//! [`DirectoryConfig::lease_grace_ms`]: crate::config::DirectoryConfig::lease_grace_ms

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::time::{Duration, Instant};

use openraft::BasicNode;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::command::{Command, Request};
use crate::directory::{Directory, Inner};
use crate::ids::NodeId;

/// What the ticker remembers of its leadership: the term it leads in and when (by tokio's
/// clock) it began, and since when (by the lease clock) it has led in touch with a quorum.
#[derive(Debug, Default)]
struct Grace {
    led: Option<(u64, Instant)>,
    since: Option<(u64, u64)>,
}

/// One reading of the metrics.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The term this member leads in (`None`: it does not lead).
    term: Option<u64>,
    /// How long ago a quorum last acknowledged it (`None`: not yet in this term).
    ack_ms: Option<u64>,
    /// The lease clock.
    now_ms: u64,
    /// Tokio's clock.
    at: Instant,
}

impl Grace {
    /// Notes a reading. A new term starts the grace; a leader out of touch (no quorum's
    /// acknowledgement for more than `limit_ms`, or none at all that long after it began to
    /// lead) forgets it, and starts it again once back in touch.
    fn observe(&mut self, seen: Seen, limit_ms: u64) {
        let Some(term) = seen.term else {
            *self = Grace::default();
            return;
        };
        let led_at = match self.led {
            Some((t, at)) if t == term => at,
            _ => {
                self.led = Some((term, seen.at));
                self.since = Some((term, seen.now_ms));
                seen.at
            }
        };
        let out = match seen.ack_ms {
            Some(ack) => ack > limit_ms,
            None => seen.at.duration_since(led_at) > Duration::from_millis(limit_ms),
        };
        if out {
            self.since = None;
        } else if self.since.is_none() {
            self.since = Some((term, seen.now_ms));
        }
    }

    /// Whether expiry may be proposed at `now_ms`: this member has led in touch for at least
    /// `grace_ms` (longer than `limit_ms`, so a leader never acknowledged cannot pass).
    fn allows(&self, now_ms: u64, grace_ms: u64) -> bool {
        self.since
            .is_some_and(|(_, since)| now_ms.saturating_sub(since) >= grace_ms)
    }
}

/// Reads the metrics: the term this member leads in from openraft's server metrics (they
/// change only with the vote, the role or the membership, and are sent before the rest),
/// the quorum's acknowledgement from the full ones.
fn read(inner: &Inner, server: &watch::Receiver<ServerMetrics>) -> Seen {
    let term = {
        let m = server.borrow();
        (m.current_leader == Some(inner.id)).then(|| m.vote.leader_id().get_term())
    };
    Seen {
        term,
        ack_ms: inner.raft.metrics().borrow().millis_since_quorum_ack,
        now_ms: inner.clock.now_ms(),
        at: Instant::now(),
    }
}

type ServerMetrics = openraft::metrics::RaftServerMetrics<NodeId, BasicNode>;

/// An expiry proposal in flight: its error, if it failed (one that timed out is left to the
/// next tick).
type Proposal = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// Runs on every member until shutdown. It reads the metrics each `lease_check_interval_ms`
/// and whenever openraft's server metrics change (so a new leadership's grace starts when
/// it begins, not at the next tick), and on a tick proposes an expiry when one is due and
/// allowed; one proposal at a time, awaited beside the ticks, so a gap while it waits is
/// still seen.
pub(crate) fn spawn_lease_ticker(
    dir: &Directory,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let weak: Weak<Inner> = std::sync::Arc::downgrade(&dir.inner);
    let period = Duration::from_millis(dir.inner.config.lease_check_interval_ms);
    let mut server = dir.inner.raft.server_metrics();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut grace = Grace::default();
        let mut pending: Option<Proposal> = None;
        loop {
            let is_tick = tokio::select! {
                _ = tick.tick() => true,
                changed = server.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    false
                }
                done = async { pending.as_mut().expect("guarded").await }, if pending.is_some() => {
                    pending = None;
                    if let Some(e) = done {
                        tracing::debug!(error = %e, "expiry proposal failed");
                    }
                    false
                }
                _ = shutdown.changed() => return,
            };
            let Some(inner) = weak.upgrade() else { return };
            let seen = read(&inner, &server);
            grace.observe(seen, inner.config.election_timeout_max_ms);
            let now_ms = seen.now_ms;
            if !is_tick || pending.is_some() || !grace.allows(now_ms, inner.config.lease_grace_ms())
            {
                continue;
            }
            let (due, expired) = inner
                .view
                .read(|s| (s.expiry_due(now_ms), s.expired_at(now_ms)));
            if !due {
                continue;
            }
            tracing::info!(member = %inner.id, ?expired, now_ms, "leases expired; proposing purge");
            let ticket = inner.ids.issue();
            let request = Request {
                id: ticket.id(),
                command: Command::ExpireLeases {
                    now_ms,
                    keep_chunks_ms: inner.config.lease_ms,
                },
            };
            let raft = inner.raft.clone();
            let limit = Duration::from_millis(inner.config.write_timeout_ms);
            pending = Some(Box::pin(async move {
                let _in_flight = ticket;
                match tokio::time::timeout(limit, raft.client_write(request)).await {
                    Ok(Err(e)) => Some(e.to_string()),
                    _ => None,
                }
            }));
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Grace, Seen};

    const GRACE: u64 = 5_000;
    const LIMIT: u64 = 1_000;

    /// A reading `ms` of tokio's clock after `t0`, the lease clock at `now_ms`.
    fn seen(t0: Instant, ms: u64, term: Option<u64>, ack_ms: Option<u64>, now_ms: u64) -> Seen {
        let at = t0 + Duration::from_millis(ms);
        Seen {
            term,
            ack_ms,
            now_ms,
            at,
        }
    }

    #[test]
    fn a_new_leader_waits_out_the_grace_from_when_it_began() {
        let t0 = Instant::now();
        let mut g = Grace::default();
        g.observe(seen(t0, 0, Some(3), None, 100_000), LIMIT);
        assert!(
            !g.allows(100_000, GRACE),
            "took over now, not yet acknowledged"
        );
        g.observe(seen(t0, 100, Some(3), Some(20), 104_000), LIMIT);
        assert!(!g.allows(104_999, GRACE), "the start stays");
        assert!(g.allows(105_000, GRACE));
        assert!(g.allows(200_000, GRACE), "stays allowed");
    }

    #[test]
    fn losing_touch_or_the_term_restarts_the_grace() {
        let t0 = Instant::now();
        let mut g = Grace::default();
        g.observe(seen(t0, 0, Some(3), Some(0), 0), LIMIT);
        assert!(g.allows(6_000, GRACE));
        g.observe(seen(t0, 7_000, Some(3), Some(LIMIT + 1), 7_000), LIMIT);
        assert!(!g.allows(7_000, GRACE), "out of touch");
        g.observe(seen(t0, 20_000, Some(3), Some(LIMIT), 20_000), LIMIT);
        assert!(!g.allows(24_999, GRACE), "back in touch: grace again");
        assert!(g.allows(25_000, GRACE));
        g.observe(seen(t0, 26_000, Some(4), None, 26_000), LIMIT);
        assert!(!g.allows(26_000, GRACE), "a new term");
        g.observe(seen(t0, 26_100, Some(4), Some(50), 26_100), LIMIT);
        assert!(g.allows(31_000, GRACE));
        g.observe(seen(t0, 32_000, None, None, 32_000), LIMIT);
        assert!(!g.allows(40_000, GRACE), "deposed");
        g.observe(seen(t0, 40_000, Some(5), Some(10), 40_000), LIMIT);
        assert!(!g.allows(44_999, GRACE), "leads again: grace again");
        assert!(g.allows(45_000, GRACE));
    }

    #[test]
    fn a_leader_never_acknowledged_is_out_of_touch_after_the_limit() {
        let t0 = Instant::now();
        let mut g = Grace::default();
        g.observe(seen(t0, 0, Some(2), None, 0), LIMIT);
        g.observe(seen(t0, LIMIT, Some(2), None, LIMIT), LIMIT);
        assert!(
            g.allows(GRACE, GRACE),
            "within the limit it counts as in touch"
        );
        g.observe(seen(t0, LIMIT + 1, Some(2), None, 9_000), LIMIT);
        assert!(!g.allows(20_000, GRACE), "never acknowledged: out of touch");
        g.observe(seen(t0, 30_000, Some(2), Some(5), 30_000), LIMIT);
        assert!(
            !g.allows(34_999, GRACE),
            "acknowledged at last: grace from then"
        );
        assert!(g.allows(35_000, GRACE));
    }
}
