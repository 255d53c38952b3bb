//! The recorded history of a run: every client operation (what, where, when invoked and
//! completed, how it ended) and every fault (kind, nodes, when it began and ended).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::client::Outcome;

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Put block `seed` under chunk key `key`.
    Put {
        /// Payload seed.
        seed: u64,
        /// Chunk key (hex).
        key: String,
    },
    /// Get `block` (put with payload `seed`).
    Get {
        /// Block id.
        block: String,
        /// Its payload seed.
        seed: u64,
    },
    /// Linearizable lookup of `key`.
    Lookup {
        /// Chunk key.
        key: String,
    },
    /// `POST /v1/route` of `key` (prefix mode).
    Route {
        /// Chunk key.
        key: String,
    },
}

/// One operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Op {
    /// The client thread.
    pub client: u32,
    /// The node asked.
    pub node: u64,
    /// What was asked.
    pub request: Request,
    /// Invocation, ms since the run began.
    pub invoke_ms: f64,
    /// Completion, ms since the run began.
    pub complete_ms: f64,
    /// How it ended.
    pub outcome: Outcome,
}

/// Kinds of faults the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL, restart with the disk kept.
    Kill,
    /// SIGKILL, block store wiped, restart.
    KillWipe,
    /// SIGSTOP, later SIGCONT.
    Pause,
    /// The leader cut off from everyone.
    IsolateLeader,
    /// A random majority / minority split.
    PartitionHalves,
    /// One direction between two nodes blocked.
    PartitionAsymmetric,
    /// Random packet loss on every link.
    Loss,
    /// Added delay on every link (user-space relay).
    Delay,
    /// Bytes flipped in a node's on-disk block segments.
    CorruptDisk,
    /// A node that serves flipped bytes for the whole run.
    LyingPeer,
}

impl FaultKind {
    /// Every kind the nemesis draws from (the lying peer is set at start instead).
    pub const DRAWN: [FaultKind; 9] = [
        FaultKind::Kill,
        FaultKind::KillWipe,
        FaultKind::Pause,
        FaultKind::IsolateLeader,
        FaultKind::PartitionHalves,
        FaultKind::PartitionAsymmetric,
        FaultKind::Loss,
        FaultKind::Delay,
        FaultKind::CorruptDisk,
    ];

    /// Snake-case name.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Whether a node's held blocks may be lost (counts as a holder failure).
    pub fn loses_memory(self) -> bool {
        matches!(self, FaultKind::Kill | FaultKind::KillWipe)
    }
}

/// One injected fault.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    /// Its kind.
    pub kind: FaultKind,
    /// The nodes it hit.
    pub nodes: Vec<u64>,
    /// Whether the leader was among them (or, for a partition, cut off from the majority).
    pub hit_leader: bool,
    /// When it began, ms since the run began.
    pub start_ms: f64,
    /// When it was healed.
    pub end_ms: f64,
    /// Details (e.g. the split, bytes flipped).
    pub detail: String,
    /// For a kill (not a wipe): the acknowledged blocks the node held in memory moments
    /// before it, from its HEADs (a copy on its disk survives a SIGKILL; one in memory does
    /// not).
    #[serde(default)]
    pub in_memory: Vec<String>,
    /// When that snapshot began: blocks the node acknowledged after it count as in memory.
    #[serde(default)]
    pub snapshot_ms: f64,
}

/// The whole recorded history.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Recorded {
    /// Client operations, in completion order.
    pub ops: Vec<Op>,
    /// Faults, in start order.
    pub faults: Vec<Fault>,
}

/// Shared recorder.
#[derive(Debug, Clone)]
pub struct Recorder {
    start: Instant,
    inner: Arc<Mutex<Recorded>>,
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            inner: Arc::new(Mutex::new(Recorded::default())),
        }
    }

    /// ms since the start.
    pub fn now_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a completed operation.
    pub fn op(&self, op: Op) {
        self.lock().ops.push(op);
    }

    /// Adds a fault.
    pub fn fault(&self, f: Fault) {
        self.lock().faults.push(f);
    }

    /// A copy of the history so far.
    pub fn snapshot(&self) -> Recorded {
        self.lock().clone()
    }
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}
