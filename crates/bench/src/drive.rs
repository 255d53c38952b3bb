//! The closed-loop clients both sides of `kvfabric bench directory` share: `clients` threads,
//! each with its own connection and one request outstanding, splitting operations
//! `0..ops` among them (client `c` does `c`, `c + clients`, …), timed from when every client
//! has connected. An operation that fails is tried again, up to [`TRIES_MAX`] times (an
//! election or a read-index round cut short by starved cores answers 503 on kvfabric and an
//! error on etcd alike); how many were tried again is printed, and the time they took counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::Context;
use kvfabric_progress::{Progress, Unit};

/// Tries of one operation before the run fails.
pub(super) const TRIES_MAX: u32 = 4;
/// Pause before a second try; doubled for each further one.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What one closed-loop run measured.
pub(super) struct Run {
    /// Seconds from the start (every client connected) to the last answer.
    pub(super) seconds: f64,
    /// Each operation's latency.
    pub(super) samples: Vec<Duration>,
}

/// Runs `op(&mut conn, i)` for every `i` in `0..ops` on `clients` threads, thread `c` with
/// the connection `connect(c)` made before the clock starts, under a bar named `what`
/// counting `unit`.
pub(super) fn closed_loop<C, K, F>(
    clients: usize,
    ops: u64,
    what: &str,
    unit: &'static str,
    connect: K,
    op: F,
) -> anyhow::Result<Run>
where
    K: Fn(usize) -> anyhow::Result<C> + Sync,
    F: Fn(&mut C, u64) -> anyhow::Result<()> + Sync,
{
    let clients = clients.max(1);
    let barrier = Barrier::new(clients + 1);
    let bar = Progress::new(what, ops, Unit::Items(unit));
    let retried = AtomicU64::new(0);
    let (barrier, bar, connect, op, retried) = (&barrier, &bar, &connect, &op, &retried);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    let conn = connect(c);
                    barrier.wait();
                    let mut conn =
                        conn.with_context(|| format!("{what}: client {c} connecting"))?;
                    let mut samples = Vec::new();
                    let mut i = c as u64;
                    while i < ops {
                        let t = Instant::now();
                        let mut tries = 1;
                        while let Err(e) = op(&mut conn, i) {
                            if tries == TRIES_MAX {
                                return Err(e.context(format!(
                                    "{what}: operation {i}, after {TRIES_MAX} tries"
                                )));
                            }
                            if tries == 1 {
                                retried.fetch_add(1, Ordering::Relaxed);
                            }
                            std::thread::sleep(RETRY_PAUSE * 2u32.pow(tries - 1));
                            tries += 1;
                        }
                        samples.push(t.elapsed());
                        bar.inc(1);
                        i += clients as u64;
                    }
                    Ok::<_, anyhow::Error>(samples)
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let mut samples = Vec::with_capacity(ops as usize);
        let mut first_error = None;
        for h in handles {
            match h.join() {
                Ok(Ok(s)) => samples.extend(s),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(anyhow::anyhow!("{what}: a client panicked"));
                }
            }
        }
        let seconds = t0.elapsed().as_secs_f64();
        bar.finish();
        let retried = retried.load(Ordering::Relaxed);
        if retried > 0 {
            println!("{what}: {retried} of {ops} operations failed and were tried again (at most {TRIES_MAX} tries)");
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(Run { seconds, samples }),
        }
    })
}
