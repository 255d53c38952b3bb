//! The nemesis: one fault at a time, drawn from the seed — kill -9 (disk kept), kill -9 with
//! the block store wiped, SIGSTOP pauses, partitions (isolated leader, majority / minority,
//! asymmetric), packet loss, user-space delay, corruption of on-disk block segments — held for
//! a while, then healed. The next fault waits for the quiet time and then for the cluster to
//! settle (every node ready, one leader, every member live). Every fault is recorded with the
//! nodes it hit and whether the leader was among them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::client::Client;
use crate::history::{Fault, FaultKind, Recorder};
use crate::nodes::Nodes;
use crate::relay::{Net, Rules};
use crate::rng::Rng;
use kvfabric_progress::Progress;

/// Set by SIGINT / SIGTERM: the run stops injecting, heals, cuts its final checks short,
/// cleans up and reports what it checked.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT / SIGTERM handler that sets [`INTERRUPTED`].
pub fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Timing of the nemesis.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Quiet time between faults (min, max), ms.
    pub quiet_ms: (u64, u64),
    /// How long a fault is held (min, max), ms.
    pub hold_ms: (u64, u64),
}

/// The leader the first answering node names.
pub fn current_leader(client: &Client, apis: &[String]) -> Option<u64> {
    apis.iter()
        .filter_map(|a| client.leader(a))
        .find_map(|(l, _)| l)
}

/// Longest wait for the cluster to settle before the next fault.
const SETTLE_MS_MAX: u64 = 20_000;

/// Waits (at most [`SETTLE_MS_MAX`], or until interrupted) until every node is ready, names
/// the same leader and takes every member for live: each fault starts from a recovered
/// cluster, so what the operations during it suffer is that fault's doing, not the tail of
/// the one before (a member whose lease ran out in a partition rejoins first).
fn settle(client: &Client, apis: &[String]) {
    let mut waited = 0;
    while waited < SETTLE_MS_MAX && !interrupted() {
        let views: Vec<_> = apis.iter().map(|a| client.view(a)).collect();
        let leader = views.first().and_then(|v| v.and_then(|(l, _)| l));
        if leader.is_some()
            && views
                .iter()
                .all(|v| matches!(v, Some((l, true)) if *l == leader))
            && apis.iter().all(|a| client.ready(a))
        {
            return;
        }
        sleep_interruptible(200);
        waited += 200;
    }
}

/// Whether SIGINT / SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleeps `ms`, or less when interrupted.
pub fn sleep_interruptible(ms: u64) {
    let mut left = ms;
    while left > 0 && !INTERRUPTED.load(Ordering::SeqCst) {
        let step = left.min(100);
        std::thread::sleep(Duration::from_millis(step));
        left -= step;
    }
}

/// Most blocks a kill's memory snapshot asks about (the newest first).
const SNAPSHOT_BLOCKS_MAX: usize = 50_000;
/// Threads asking them.
const SNAPSHOT_THREADS: usize = 4;

/// The acknowledged blocks node `v` (at `api`) says it holds in memory, asked block by block
/// (HEAD), for the blocks whose put named it a holder; a block it does not answer about in
/// time is counted as in memory (the checker must not blame a copy that may have been lost).
fn memory_snapshot(client: &Client, api: &str, rec: &Recorder, v: u64) -> Vec<String> {
    let mut blocks: Vec<String> = rec
        .snapshot()
        .ops
        .into_iter()
        .rev()
        .filter_map(|o| match o.outcome {
            crate::client::Outcome::Put { block, holders, .. } if holders.contains(&v) => {
                Some(block)
            }
            _ => None,
        })
        .take(SNAPSHOT_BLOCKS_MAX)
        .collect();
    blocks.sort();
    blocks.dedup();
    let per = blocks.len().div_ceil(SNAPSHOT_THREADS).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = blocks
            .chunks(per)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter(|b| client.in_memory(api, b) != Some(false))
                        .cloned()
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_default())
            .collect()
    })
}

/// Injects faults until `deadline_ms` (run clock) or an interrupt, naming each on `bar`;
/// leaves everything healed.
#[allow(clippy::too_many_arguments)]
pub fn run(
    nodes: &mut Nodes,
    net: &Net,
    rec: &Recorder,
    rng: &mut Rng,
    pace: Pace,
    kinds: &[FaultKind],
    deadline_ms: f64,
    bar: &Progress,
) {
    let client = Client::new(Duration::from_secs(2));
    let mut injected = 0u64;
    let apis: Vec<String> = nodes.layout.iter().map(|n| n.api()).collect();
    let n = nodes.len() as u64;
    let mut order: Vec<FaultKind> = Vec::new();
    loop {
        sleep_interruptible(rng.range(pace.quiet_ms.0, pace.quiet_ms.1));
        settle(&client, &apis);
        if INTERRUPTED.load(Ordering::SeqCst) || rec.now_ms() >= deadline_ms {
            break;
        }
        if order.is_empty() {
            // Every kind once per round, in a seed-determined order.
            order = kinds.to_vec();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let kind = order.pop().unwrap_or(FaultKind::Kill);
        let leader = current_leader(&client, &apis);
        let hold = rng.range(pace.hold_ms.0, pace.hold_ms.1);
        let pick = |rng: &mut Rng| {
            // Half the process faults aim at the leader. Both draws always happen, so that
            // the rest of the schedule does not depend on who leads.
            let (aim, any) = (rng.chance(0.5), rng.below(n) + 1);
            match leader {
                Some(l) if aim => l,
                _ => any,
            }
        };
        let mut start_ms = rec.now_ms();
        let (mut in_memory, mut snapshot_ms) = (Vec::new(), 0.0);
        injected += 1;
        bar.message(format!("fault {injected}: {}", kind.name()));
        let (hit, detail): (Vec<u64>, String) = match kind {
            FaultKind::Kill | FaultKind::KillWipe => {
                let v = pick(rng);
                if kind == FaultKind::Kill {
                    snapshot_ms = rec.now_ms();
                    in_memory = memory_snapshot(&client, &apis[v as usize - 1], rec, v);
                    // The fault begins at the kill, not at the snapshot before it (the node
                    // served throughout the snapshot; counting that time would dilute it).
                    start_ms = rec.now_ms();
                    nodes.kill9(v);
                } else {
                    nodes.kill_and_wipe(v);
                }
                sleep_interruptible(hold);
                if let Err(e) = nodes.start(v) {
                    eprintln!("kvfabric-chaos: restarting n{v}: {e:#}");
                }
                (vec![v], format!("down {hold} ms"))
            }
            FaultKind::Pause => {
                let v = pick(rng);
                nodes.pause(v);
                sleep_interruptible(hold);
                nodes.resume(v);
                (vec![v], format!("stopped {hold} ms"))
            }
            FaultKind::IsolateLeader | FaultKind::PartitionHalves => {
                let mut all: Vec<u64> = (1..=n).collect();
                for i in (1..all.len()).rev() {
                    all.swap(i, rng.below(i as u64 + 1) as usize);
                }
                let minority_len = ((n - 1) / 2).max(1) as usize;
                let minority: Vec<u64> = match (kind, leader) {
                    (FaultKind::IsolateLeader, Some(l)) => vec![l],
                    _ => all[..minority_len].to_vec(),
                };
                let majority: Vec<u64> = (1..=n).filter(|x| !minority.contains(x)).collect();
                let mut r = Rules::default();
                r.split(&minority, &majority);
                net.set(r);
                sleep_interruptible(hold);
                net.heal();
                (
                    minority.clone(),
                    format!("{minority:?} | {majority:?}, {hold} ms"),
                )
            }
            FaultKind::PartitionAsymmetric => {
                let a = rng.below(n) + 1;
                let b = (a + rng.below(n - 1)) % n + 1;
                let mut r = Rules::default();
                r.blocked.insert((a, b));
                net.set(r);
                sleep_interruptible(hold);
                net.heal();
                (vec![a], format!("n{a} -> n{b} dropped, {hold} ms"))
            }
            FaultKind::Loss => {
                let loss = rng.range(10, 30) as f64 / 100.0;
                net.set(Rules {
                    loss,
                    ..Rules::default()
                });
                sleep_interruptible(hold);
                net.heal();
                (
                    (1..=n).collect(),
                    format!("{:.0}% loss, {hold} ms", loss * 100.0),
                )
            }
            FaultKind::Delay => {
                let d = rng.range(20, 150);
                net.set(Rules {
                    delay: Duration::from_millis(d),
                    ..Rules::default()
                });
                sleep_interruptible(hold);
                net.heal();
                ((1..=n).collect(), format!("+{d} ms each way, {hold} ms"))
            }
            FaultKind::CorruptDisk => {
                let v = rng.below(n) + 1;
                let flipped = nodes.corrupt_segments(v, rng, 8);
                // The node keeps running on its corrupted segments for the hold: that is the
                // window its availability is judged in (the bytes stay flipped after it).
                sleep_interruptible(hold);
                (vec![v], format!("{flipped} bytes flipped, held {hold} ms"))
            }
            FaultKind::LyingPeer => (Vec::new(), String::new()),
        };
        let hit_leader = match kind {
            FaultKind::Loss | FaultKind::Delay | FaultKind::CorruptDisk => false,
            FaultKind::PartitionAsymmetric => false,
            _ => leader.is_some_and(|l| hit.contains(&l)),
        };
        bar.message(format!(
            "{injected} faults; last {} on {hit:?} ({detail})",
            kind.name()
        ));
        rec.fault(Fault {
            kind,
            nodes: hit,
            hit_leader,
            start_ms,
            end_ms: rec.now_ms(),
            detail,
            in_memory: std::mem::take(&mut in_memory),
            snapshot_ms,
        });
    }
    heal_all(nodes, net);
}

/// Clears the network rules, resumes paused nodes and starts any that are down.
pub fn heal_all(nodes: &mut Nodes, net: &Net) {
    net.heal();
    for id in 1..=nodes.len() as u64 {
        nodes.resume(id);
        if !nodes.is_up(id) {
            if let Err(e) = nodes.start(id) {
                eprintln!("kvfabric-chaos: restarting n{id}: {e:#}");
            }
        }
    }
}
