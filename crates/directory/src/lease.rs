//! The leader's lease ticker: proposes `ExpireLeases` from the clock when a lease has run out.
//!
//! Every member runs the ticker; only the one that believes it leads proposes, and only when
//! its applied state shows an expired lease, so an idle cluster writes nothing. A deposed
//! leader's proposal fails (it cannot commit), and a duplicate is harmless: expiry is
//! idempotent.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::command::{Command, Request};
use crate::directory::{Directory, Inner};

pub(crate) fn spawn_lease_ticker(
    dir: &Directory,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let weak: Weak<Inner> = std::sync::Arc::downgrade(&dir.inner);
    let period = Duration::from_millis(dir.inner.config.lease_check_interval_ms);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let Some(inner) = weak.upgrade() else { return };
            if inner.raft.metrics().borrow().current_leader != Some(inner.id) {
                continue;
            }
            let now_ms = inner.clock.now_ms();
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
            let write = inner.raft.client_write(request);
            let limit = Duration::from_millis(inner.config.write_timeout_ms);
            tokio::select! {
                r = tokio::time::timeout(limit, write) => {
                    if let Ok(Err(e)) = r {
                        tracing::debug!(member = %inner.id, error = %e, "expiry proposal failed");
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    })
}
