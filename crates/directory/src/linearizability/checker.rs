//! The search: Wing & Gong's backtracking over candidate next operations, with Lowe's cache of
//! (linearized set, register value) states already shown to lead nowhere.

use std::collections::{BTreeMap, HashSet};

use super::history::{Call, History, Operation, Ret};

/// Most operations one key may have (the linearized set is a 256-bit set).
const OPS_PER_KEY_HARD_MAX: usize = 256;

/// Bounds of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckLimits {
    /// Most operations per key (at most 256).
    pub ops_per_key_max: usize,
    /// Most search states explored over all keys.
    pub states_max: u64,
}

impl Default for CheckLimits {
    fn default() -> CheckLimits {
        CheckLimits {
            ops_per_key_max: 200,
            states_max: 5_000_000,
        }
    }
}

/// The result of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization exists for every key.
    Linearizable {
        /// Keys checked.
        keys: usize,
        /// Operations checked.
        ops: usize,
        /// Search states explored.
        states: u64,
    },
    /// No linearization exists for `key`.
    NotLinearizable {
        /// The key.
        key: u64,
        /// The deepest partial linearization found, and what could not follow it.
        explanation: String,
    },
    /// A bound was reached before an answer.
    Unknown {
        /// The key being checked.
        key: u64,
        /// Which bound.
        reason: String,
    },
}

type Bits = [u64; 4];

fn set(b: &Bits, i: usize) -> Bits {
    let mut out = *b;
    out[i / 64] |= 1 << (i % 64);
    out
}

fn has(b: &Bits, i: usize) -> bool {
    b[i / 64] & (1 << (i % 64)) != 0
}

struct Search<'a> {
    ops: &'a [Operation],
    /// Completion time, `u64::MAX` for pending operations.
    ret: Vec<u64>,
    completed: Bits,
    failed: HashSet<(Bits, Option<u64>)>,
    states: u64,
    states_max: u64,
    deepest: (usize, Option<u64>, Bits),
}

enum Found {
    Yes,
    No,
    Budget,
}

impl Search<'_> {
    fn covers(&self, done: &Bits) -> bool {
        (0..4).all(|w| done[w] & self.completed[w] == self.completed[w])
    }

    fn run(&mut self, done: Bits, value: Option<u64>, depth: usize) -> Found {
        if self.covers(&done) {
            return Found::Yes;
        }
        if depth >= self.deepest.0 {
            self.deepest = (depth, value, done);
        }
        // An operation may go next only if nothing left undone completed before it began.
        let min_ret = (0..self.ops.len())
            .filter(|i| !has(&done, *i))
            .map(|i| self.ret[i])
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.ops.len() {
            if has(&done, i) || self.ops[i].invoke_ns > min_ret {
                continue;
            }
            let next = match (self.ops[i].call, self.ops[i].complete) {
                (Call::Write(v), _) => Some(v),
                (Call::Read, Some((_, Ret::Read(seen)))) if seen == value => value,
                _ => continue,
            };
            let nd = set(&done, i);
            if self.failed.contains(&(nd, next)) {
                continue;
            }
            self.states += 1;
            if self.states > self.states_max {
                return Found::Budget;
            }
            match self.run(nd, next, depth + 1) {
                Found::Yes => return Found::Yes,
                Found::Budget => return Found::Budget,
                Found::No => {
                    self.failed.insert((nd, next));
                }
            }
        }
        Found::No
    }
}

/// Checks a history of register operations, every register starting at `initial`.
pub fn check_registers(history: &History, initial: Option<u64>, limits: CheckLimits) -> Verdict {
    let mut by_key: BTreeMap<u64, Vec<Operation>> = BTreeMap::new();
    for op in &history.ops {
        by_key.entry(op.key).or_default().push(*op);
    }
    let per_key_max = limits.ops_per_key_max.min(OPS_PER_KEY_HARD_MAX);
    let mut states = 0u64;
    for (key, ops) in &by_key {
        if ops.len() > per_key_max {
            return Verdict::Unknown {
                key: *key,
                reason: format!(
                    "at most {per_key_max} operations per key expected, found {}",
                    ops.len()
                ),
            };
        }
        let mut completed = [0u64; 4];
        let ret: Vec<u64> = ops
            .iter()
            .enumerate()
            .map(|(i, op)| match op.complete {
                Some((t, _)) => {
                    completed = set(&completed, i);
                    t
                }
                None => u64::MAX,
            })
            .collect();
        let mut search = Search {
            ops,
            ret,
            completed,
            failed: HashSet::new(),
            states: 0,
            states_max: limits.states_max.saturating_sub(states),
            deepest: (0, initial, [0; 4]),
        };
        let found = search.run([0; 4], initial, 0);
        states += search.states;
        match found {
            Found::Yes => {}
            Found::Budget => {
                return Verdict::Unknown {
                    key: *key,
                    reason: format!("search budget of {} states exhausted", limits.states_max),
                }
            }
            Found::No => {
                let (depth, value, done) = search.deepest;
                let stuck: Vec<String> = (0..ops.len())
                    .filter(|i| !has(&done, *i) && ops[*i].complete.is_some())
                    .take(4)
                    .map(|i| describe(&ops[i]))
                    .collect();
                return Verdict::NotLinearizable {
                    key: *key,
                    explanation: format!(
                        "after {depth} of {} operations (register = {value:?}) none of these can \
                         come next: {}",
                        ops.len(),
                        stuck.join("; ")
                    ),
                };
            }
        }
    }
    Verdict::Linearizable {
        keys: by_key.len(),
        ops: history.ops.len(),
        states,
    }
}

fn describe(op: &Operation) -> String {
    let (end, ret) = match op.complete {
        Some((t, r)) => (t.to_string(), format!("{r:?}")),
        None => ("?".into(), "pending".into()),
    };
    format!(
        "client {} {:?} -> {} in [{} ns, {} ns]",
        op.client, op.call, ret, op.invoke_ns, end
    )
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
