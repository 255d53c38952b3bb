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
//! term: time for every live node to renew (nodes renew at least every half lease). A leader
//! is out of touch while a quorum's last acknowledgement is older than
//! `election_timeout_max_ms` (openraft's `millis_since_quorum_ack`); the grace restarts when
//! it is back in touch. A shorter silence cannot cost a live node its lease: a node renews at
//! least every half lease, and a lease is longer than two election timeouts (the config's
//! validation), so what it has left outlasts the silence. etcd's lessor does the same on
//! promotion (it refreshes every lease).
//! The cost: a node that died just before a long gap is expired up to half a lease later
//! than its lease said; after a prompt failover (a second or two) nothing changes, since
//! every lease then still has more than half of itself left.
//!
//! [`DirectoryConfig::lease_grace_ms`]: crate::config::DirectoryConfig::lease_grace_ms

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::command::{Command, Request};
use crate::directory::{Directory, Inner};

/// What the ticker remembers of its leadership: since when (by the lease clock) this member
/// has led in touch with a quorum, and in which term.
#[derive(Debug, Default)]
struct Grace {
    since: Option<(u64, u64)>,
}

impl Grace {
    /// Notes what the metrics say at `now_ms`: this member leads in `term` (`None`: it does
    /// not lead), in touch with a quorum or not. Losing the lead or touch forgets the start;
    /// a new term starts again.
    fn observe(&mut self, term: Option<u64>, in_touch: bool, now_ms: u64) {
        match (term, self.since) {
            (Some(term), Some((t, _))) if in_touch && t == term => {}
            (Some(term), _) if in_touch => self.since = Some((term, now_ms)),
            _ => self.since = None,
        }
    }

    /// Whether expiry may be proposed at `now_ms`: this member has led in touch for at least
    /// `grace_ms`.
    fn allows(&self, now_ms: u64, grace_ms: u64) -> bool {
        self.since
            .is_some_and(|(_, since)| now_ms.saturating_sub(since) >= grace_ms)
    }
}

/// What the metrics say of this member's leadership: the term it leads in, and whether a
/// quorum acknowledged it within `election_timeout_max_ms`.
fn leadership(inner: &Inner) -> (Option<u64>, bool) {
    let m = inner.raft.metrics();
    let m = m.borrow();
    let leads = m.current_leader == Some(inner.id);
    let limit = inner.config.election_timeout_max_ms;
    let in_touch = m.millis_since_quorum_ack.is_some_and(|a| a <= limit);
    (leads.then_some(m.current_term), in_touch)
}

/// An expiry proposal in flight: its error, if it failed (one that timed out is left to the
/// next tick).
type Proposal = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// Runs on every member until shutdown. It watches the Raft metrics (so the grace starts when
/// the lead or touch is gained, not at the next tick) and, each `lease_check_interval_ms`,
/// proposes an expiry when one is due and allowed; one proposal at a time, awaited beside
/// the watching, so a gap while it waits is still seen.
pub(crate) fn spawn_lease_ticker(
    dir: &Directory,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let weak: Weak<Inner> = std::sync::Arc::downgrade(&dir.inner);
    let period = Duration::from_millis(dir.inner.config.lease_check_interval_ms);
    let mut metrics = dir.inner.raft.metrics();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut grace = Grace::default();
        let mut pending: Option<Proposal> = None;
        loop {
            let is_tick = tokio::select! {
                _ = tick.tick() => true,
                changed = metrics.changed() => {
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
            let (term, in_touch) = leadership(&inner);
            let now_ms = inner.clock.now_ms();
            grace.observe(term, in_touch, now_ms);
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
            let request = Request {
                id: inner.next_request_id(),
                command: Command::ExpireLeases {
                    now_ms,
                    keep_chunks_ms: inner.config.lease_ms,
                },
            };
            let raft = inner.raft.clone();
            let limit = Duration::from_millis(inner.config.write_timeout_ms);
            pending = Some(Box::pin(async move {
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
    use super::Grace;

    const GRACE: u64 = 5_000;

    #[test]
    fn a_new_leader_waits_out_the_grace_in_touch() {
        let mut g = Grace::default();
        g.observe(Some(3), false, 90_000);
        assert!(!g.allows(200_000, GRACE), "leads, not yet acknowledged");
        g.observe(Some(3), true, 100_000);
        assert!(!g.allows(100_000, GRACE), "took over now");
        g.observe(Some(3), true, 104_000);
        assert!(!g.allows(104_999, GRACE), "the start stays");
        assert!(g.allows(105_000, GRACE));
        assert!(g.allows(200_000, GRACE), "stays allowed");
    }

    #[test]
    fn losing_touch_or_the_term_restarts_the_grace() {
        let mut g = Grace::default();
        g.observe(Some(3), true, 0);
        assert!(g.allows(6_000, GRACE));
        g.observe(Some(3), false, 7_000);
        assert!(!g.allows(7_000, GRACE), "out of touch");
        g.observe(Some(3), true, 20_000);
        assert!(!g.allows(24_999, GRACE), "back in touch: grace again");
        assert!(g.allows(25_000, GRACE));
        g.observe(Some(4), true, 26_000);
        assert!(!g.allows(26_000, GRACE), "a new term");
        assert!(g.allows(31_000, GRACE));
        g.observe(None, true, 32_000);
        assert!(!g.allows(40_000, GRACE), "deposed");
        g.observe(Some(5), true, 40_000);
        assert!(!g.allows(44_999, GRACE), "leads again: grace again");
        assert!(g.allows(45_000, GRACE));
    }

    #[test]
    fn no_grace_allows_at_once_when_in_touch() {
        let mut g = Grace::default();
        g.observe(Some(1), true, 0);
        assert!(g.allows(0, 0));
        g.observe(Some(1), false, 1);
        assert!(!g.allows(1, 0));
    }
}
