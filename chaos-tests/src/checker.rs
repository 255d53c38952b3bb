//! The checker over a recorded history and the final state of the cluster:
//!
//! - **wrong reads**: a get that returned bytes other than the ones put under that id (the
//!   id is the blake3 of those bytes, so this is "bytes whose blake3 differs"); must be 0.
//! - **lost acknowledged blocks**: a block acknowledged (its put's `holders`: the nodes that
//!   said they hold a verified copy) that no node holds at the end, unless every one of those
//!   holders lost its copy since the put: killed with its disk wiped, or killed while the copy
//!   was only in memory (the kill's snapshot of the node's HEADs says so, or the node
//!   acknowledged it after the snapshot began, or a client's get of it on that node began
//!   between the snapshot and the kill: a hit moves a disk copy up to memory); must be 0. A
//!   block acknowledged without holders (an older node) falls back to "at least `r` nodes
//!   killed since its put".
//! - **directory linearizability**: per chunk key, the put (a register write of its block) and
//!   the linearizable lookups (register reads) must have a linearization
//!   (`kvfabric_directory::linearizability`). Checked for keys still mapped at the end (a key
//!   is legitimately unmapped when its block lost every owner); must be 0 non-linearizable.
//! - **route answers**: `POST /v1/route` of a valid key answers 200 (a ranking) or 503 (the
//!   node cannot answer now); any other status is `bad_route`; must be 0.
//! - **availability**, per fault kind ([`crate::availability`]): put and get success rate and
//!   latency p50 / p99 during the fault and after it was healed, counting the operations sent
//!   to nodes the fault did not hit, each kind's faults pooled; a single-node fault kind
//!   below its thresholds (however few operations it had) is `unavailable`.
//! - **convergence** and **unavailability** come from the run ([`FinalState`]).

use std::collections::{BTreeMap, BTreeSet};

use kvfabric_directory::linearizability::{
    check_registers, Call, CheckLimits, History, Operation, Ret, Verdict,
};
use serde::{Deserialize, Serialize};

use crate::client::Outcome;
use crate::history::{FaultKind, Recorded, Request};

/// What the harness saw after the faults stopped.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FinalState {
    /// Acknowledged block → nodes whose HEAD said 200.
    pub holders: BTreeMap<String, Vec<u64>>,
    /// Chunk key → block its final linearizable lookup named (absent: no answer).
    pub mapped: BTreeMap<String, Option<String>>,
    /// Seconds from healing to convergence; `None`: not within the bound.
    pub converged_s: Option<f64>,
    /// The bound.
    pub converge_bound_s: f64,
    /// Why it did not converge (last mismatch seen).
    pub converge_note: String,
    /// The final phase was cut short by SIGINT / SIGTERM: `holders` and `mapped` hold what
    /// was probed before it, and convergence was not waited for to the bound.
    pub interrupted: bool,
    /// Node → blocks whose copy there failed verification (a corrupted disk's bytes found by
    /// a read, a repair or the scrub) and was dropped, as each node's log reports it.
    #[serde(default)]
    pub rotted: BTreeMap<u64, BTreeSet<String>>,
    /// The directory entry at which every node's replica was compared once converged
    /// (`None`: no moment found where all had applied the same entry, or not converged).
    #[serde(default)]
    pub replicas_at: Option<String>,
    /// Each node's replica digest there, when they were not all equal.
    #[serde(default)]
    pub replicas_diverged: Option<String>,
}

/// One violation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Violation {
    /// Kind: `wrong_read`, `lost_acked_block`, `not_linearizable`, `not_converged`,
    /// `replicas_diverged`, `bad_route`, `unavailable`.
    pub kind: String,
    /// What, with the history excerpt that shows it.
    pub detail: String,
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Checked {
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Reads compared.
    pub reads_checked: u64,
    /// Route answers checked.
    #[serde(default)]
    pub routes_checked: u64,
    /// Acknowledged blocks checked for loss.
    pub acked_checked: u64,
    /// Acknowledged blocks lost with enough failures to excuse it.
    pub lost_excused: u64,
    /// Chunk keys checked for linearizability.
    pub keys_checked: u64,
    /// Keys whose check hit a bound (neither pass nor fail).
    pub keys_unknown: u64,
    /// Unavailability after each leader loss: ms from the fault to the completion of the first
    /// put sent after it, to a node it did not hit, that succeeded.
    pub unavailability_ms: Vec<f64>,
    /// Leader losses during which no put was sent to a node the fault did not hit (every
    /// client was held by the node it hit), so they say nothing of unavailability.
    #[serde(default)]
    pub leader_losses_unprobed: u64,
    /// Finding (not a violation): acknowledged blocks some node still holds whose chunk key
    /// no longer resolves. When a block loses every owner record (leases expired, or holders
    /// rejoined) the directory keeps its chunk mappings dormant for a lease (they still
    /// resolve, with no owners); a holder that registers the block again (by id) only after
    /// that finds them gone.
    pub unmapped_but_held: u64,
    /// Up to 5 examples of [`Checked::unmapped_but_held`]: chunk key, block, holders.
    pub unmapped_examples: Vec<String>,
    /// Availability per fault kind.
    #[serde(default)]
    pub availability: Vec<crate::availability::KindAvailability>,
    /// Whether shortfalls of [`Checked::availability`] were violations (`--availability
    /// judge`, the default) or only reported (`--availability report`).
    #[serde(default)]
    pub availability_judged: bool,
}

impl Checked {
    /// Violations by kind.
    pub fn by_kind(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for v in &self.violations {
            *m.entry(v.kind.clone()).or_insert(0) += 1;
        }
        m
    }
}

fn value_of(block: &str) -> u64 {
    u64::from_str_radix(block.get(..15).unwrap_or("0"), 16).unwrap_or(0) + 1
}

fn key_of(op: &crate::history::Op) -> &str {
    match &op.request {
        Request::Put { key, .. } | Request::Lookup { key } => key,
        Request::Get { .. } | Request::Route { .. } => "",
    }
}

fn ns(ms: f64) -> u64 {
    (ms.max(0.0) * 1e6) as u64
}

/// Checks `h` against `end`, availability shortfalls included as violations.
pub fn check(h: &Recorded, end: &FinalState) -> Checked {
    check_with(h, end, true)
}

/// Checks `h` against `end`; with `judge_availability` false, the availability table is
/// computed and reported but its shortfalls are not violations (a run too short to hold
/// enough operations per fault kind: the CI smoke).
pub fn check_with(h: &Recorded, end: &FinalState, judge_availability: bool) -> Checked {
    let mut out = Checked {
        availability_judged: judge_availability,
        ..Checked::default()
    };
    // Wrong reads.
    for op in &h.ops {
        if let Outcome::Got {
            bytes_match,
            source,
        } = &op.outcome
        {
            out.reads_checked += 1;
            if !bytes_match {
                out.violations.push(Violation {
                    kind: "wrong_read".into(),
                    detail: format!(
                        "client {} got {:?} from n{} (source {source}) at {:.0} ms: bytes differ from the block put under that id",
                        op.client, op.request, op.node, op.invoke_ms
                    ),
                });
            }
        }
    }
    // Route answers: a valid request is ranked (200) or refused for the node's state (503);
    // anything else (a 4xx for valid input, a 500) is a bad answer.
    for op in &h.ops {
        let Request::Route { key } = &op.request else {
            continue;
        };
        out.routes_checked += 1;
        if let Outcome::Refused { status, code } = &op.outcome {
            if *status != 503 {
                out.violations.push(Violation {
                    kind: "bad_route".into(),
                    detail: format!(
                        "client {} route of {key} on n{} at {:.0} ms: {status} {code}",
                        op.client, op.node, op.invoke_ms
                    ),
                });
            }
        }
    }
    // Client gets that may have moved a holder's disk copy up to memory (a local hit
    // promotes it), by (node, block): when each began. A get that had no answer may have been
    // served all the same.
    let mut local_gets: BTreeMap<(u64, &str), Vec<f64>> = BTreeMap::new();
    for op in &h.ops {
        let Request::Get { block, .. } = &op.request else {
            continue;
        };
        let maybe_local = match &op.outcome {
            Outcome::Got { source, .. } => source == "local",
            Outcome::NoAnswer { .. } => true,
            _ => false,
        };
        if maybe_local {
            local_gets
                .entry((op.node, block.as_str()))
                .or_default()
                .push(op.invoke_ms);
        }
    }
    let read_after_snapshot = |holder: u64, block: &str, kill: &crate::history::Fault| {
        kill.snapshot_ms > 0.0
            && local_gets.get(&(holder, block)).is_some_and(|t| {
                t.iter()
                    .any(|&t| t >= kill.snapshot_ms && t <= kill.start_ms)
            })
    };
    // Lost acknowledged blocks.
    for op in &h.ops {
        let (
            Request::Put { .. },
            Outcome::Put {
                block,
                replicas,
                holders: acked_by,
            },
        ) = (&op.request, &op.outcome)
        else {
            continue;
        };
        let Some(holders) = end.holders.get(block) else {
            continue;
        };
        out.acked_checked += 1;
        if !holders.is_empty() {
            if let (Request::Put { key, .. }, Some(None)) =
                (&op.request, end.mapped.get(key_of(op)))
            {
                out.unmapped_but_held += 1;
                if out.unmapped_examples.len() < 5 {
                    out.unmapped_examples
                        .push(format!("key {key} -> block {block}, held by {holders:?}"));
                }
            }
            continue;
        }
        let since = h
            .faults
            .iter()
            .filter(|f| f.kind.loses_memory() && f.end_ms >= op.invoke_ms);
        let excused = if acked_by.is_empty() {
            let failed: BTreeSet<u64> = since.flat_map(|f| f.nodes.iter().copied()).collect();
            failed.len() as u32 > replicas.saturating_sub(1)
        } else {
            let lost = |holder: u64| {
                end.rotted.get(&holder).is_some_and(|b| b.contains(block))
                    || h.faults
                        .iter()
                        .filter(|f| f.kind.loses_memory() && f.end_ms >= op.invoke_ms)
                        .filter(|f| f.nodes.contains(&holder))
                        .any(|f| {
                            f.kind == FaultKind::KillWipe
                                || f.in_memory.iter().any(|b| b == block)
                                || (f.snapshot_ms > 0.0 && op.complete_ms >= f.snapshot_ms)
                                || read_after_snapshot(holder, block, f)
                        })
            };
            acked_by.iter().all(|h| lost(*h))
        };
        if excused {
            out.lost_excused += 1;
        } else {
            out.violations.push(Violation {
                kind: "lost_acked_block".into(),
                detail: format!(
                    "block {block} acknowledged by {acked_by:?} (n{} at {:.0} ms) is held by no node, and not every holder lost its copy since (faults since: {:?})",
                    op.node,
                    op.complete_ms,
                    h.faults
                        .iter()
                        .filter(|f| f.end_ms >= op.invoke_ms && f.kind.loses_memory())
                        .map(|f| format!("{} {:?} at {:.0} ms", f.kind.name(), f.nodes, f.start_ms))
                        .collect::<Vec<_>>()
                ),
            });
        }
    }
    // Linearizability of the directory, per chunk key.
    let mut per_key: BTreeMap<&str, Vec<Operation>> = BTreeMap::new();
    let mut key_ids: BTreeMap<&str, u64> = BTreeMap::new();
    for op in &h.ops {
        let key = match &op.request {
            Request::Put { key, .. } | Request::Lookup { key } => key.as_str(),
            Request::Get { .. } | Request::Route { .. } => continue,
        };
        let Some(Some(final_block)) = end.mapped.get(key) else {
            continue;
        };
        let id = {
            let n = key_ids.len() as u64;
            *key_ids.entry(key).or_insert(n)
        };
        let v = value_of(final_block);
        let (call, complete) = match (&op.request, &op.outcome) {
            (Request::Put { .. }, Outcome::Put { .. }) => {
                (Call::Write(v), Some((ns(op.complete_ms), Ret::Written)))
            }
            // Refused before the body was read: no effect.
            (Request::Put { .. }, Outcome::Refused { status, .. }) if *status < 500 => continue,
            // Unknown effect: pending.
            (Request::Put { .. }, _) => (Call::Write(v), None),
            (Request::Lookup { .. }, Outcome::Looked { block, .. }) => {
                let r = block.as_deref().map(|b| {
                    if b == final_block {
                        v
                    } else {
                        value_of(b) ^ 1 << 62
                    }
                });
                (Call::Read, Some((ns(op.complete_ms), Ret::Read(r))))
            }
            _ => continue,
        };
        per_key.entry(key).or_default().push(Operation {
            client: op.client,
            key: id,
            call,
            invoke_ns: ns(op.invoke_ms),
            complete,
        });
    }
    for (key, mut ops) in per_key {
        ops.sort_by_key(|o| o.invoke_ns);
        out.keys_checked += 1;
        match check_registers(&History { ops: ops.clone() }, None, CheckLimits::default()) {
            Verdict::Linearizable { .. } => {}
            Verdict::Unknown { .. } => out.keys_unknown += 1,
            Verdict::NotLinearizable { explanation, .. } => {
                let excerpt: Vec<String> = h
                    .ops
                    .iter()
                    .filter(|o| {
                        matches!(&o.request, Request::Put { key: k, .. } | Request::Lookup { key: k } if k == key)
                    })
                    .take(12)
                    .map(|o| {
                        format!(
                            "[{:.0}..{:.0} ms] c{} n{} {:?} -> {:?}",
                            o.invoke_ms, o.complete_ms, o.client, o.node, o.request, o.outcome
                        )
                    })
                    .collect();
                out.violations.push(Violation {
                    kind: "not_linearizable".into(),
                    detail: format!(
                        "chunk key {key}: {explanation}\n    {}",
                        excerpt.join("\n    ")
                    ),
                });
            }
        }
    }
    // Convergence (not judged when the wait was cut short by an interrupt).
    if end.converged_s.is_none() && !end.interrupted {
        out.violations.push(Violation {
            kind: "not_converged".into(),
            detail: format!(
                "no convergence within {:.0} s of healing: {}",
                end.converge_bound_s, end.converge_note
            ),
        });
    }
    // One directory log, one state: replicas at one applied entry hold one digest.
    if let Some(d) = &end.replicas_diverged {
        out.violations.push(Violation {
            kind: "replicas_diverged".into(),
            detail: format!(
                "directory replicas differ at {}: {d}",
                end.replicas_at.as_deref().unwrap_or("?")
            ),
        });
    }
    // Availability per fault kind, against the single-node thresholds.
    out.availability = crate::availability::per_kind(h);
    for k in out.availability.iter().filter(|_| judge_availability) {
        for short in k.shortfalls() {
            out.violations.push(Violation {
                kind: "unavailable".into(),
                detail: format!("{} ({} faults): {short}", k.kind.name(), k.faults),
            });
        }
    }
    // Unavailability after leader loss: only puts to the nodes the fault spared, sent while it
    // lasted (a put to the stopped node waits for the node, not for the fabric).
    for f in h.faults.iter().filter(|f| f.hit_leader) {
        let hit = crate::availability::hit(f);
        let first = h
            .ops
            .iter()
            .filter(|o| o.invoke_ms >= f.start_ms && o.invoke_ms < f.end_ms)
            .filter(|o| !hit.contains(&o.node) && matches!(o.outcome, Outcome::Put { .. }))
            .map(|o| o.complete_ms)
            .fold(f64::INFINITY, f64::min);
        if first.is_finite() {
            out.unavailability_ms.push(first - f.start_ms);
        } else {
            out.leader_losses_unprobed += 1;
        }
    }
    out
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
