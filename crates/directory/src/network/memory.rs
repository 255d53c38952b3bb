//! An in-process [`FrameTransport`] with a nemesis: partitions, isolated members, dropped and
//! delayed messages, for deterministic cluster tests.
//!
//! Every message is a real frame (encoded, checked and decoded by the callee), so tests exercise
//! the codec and the serde of every openraft type that crosses the wire. Faults are set by the
//! test and applied per directed link; drops are decided by a seeded generator, so a given seed
//! and message order give the same drops.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use super::{BoxFuture, FrameTransport, RpcServer};
use crate::error::DirectoryError;
use crate::ids::NodeId;

/// Counts of what the router did, for tests that assert a fault really bit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Requests delivered and answered.
    pub delivered: u64,
    /// Requests or responses refused by a partition or isolation.
    pub refused: u64,
    /// Requests dropped at random.
    pub dropped: u64,
    /// Requests to a member that is not running.
    pub not_running: u64,
}

#[derive(Default)]
struct State {
    servers: BTreeMap<NodeId, RpcServer>,
    /// Directed links that carry nothing.
    blocked: BTreeSet<(NodeId, NodeId)>,
    /// Members cut off from everyone.
    isolated: BTreeSet<NodeId>,
    /// Extra latency per directed link.
    delay_ms: BTreeMap<(NodeId, NodeId), u64>,
    /// Probability of dropping a request, in thousandths.
    drop_per_mille: u32,
    rng: u64,
    stats: RouterStats,
}

impl State {
    fn cut(&self, from: NodeId, to: NodeId) -> bool {
        self.blocked.contains(&(from, to))
            || self.isolated.contains(&from)
            || self.isolated.contains(&to)
    }

    /// xorshift64*: enough to spread drops, seeded so runs repeat.
    fn roll(&mut self) -> u32 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % 1000
    }
}

/// The in-memory network of one test cluster.
pub struct InMemoryRouter {
    state: Mutex<State>,
}

impl std::fmt::Debug for InMemoryRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryRouter")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl InMemoryRouter {
    /// A router with no members and no faults; `seed` drives random drops.
    pub fn new(seed: u64) -> InMemoryRouter {
        InMemoryRouter {
            state: Mutex::new(State {
                rng: seed | 1,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes a running member reachable.
    pub fn register(&self, node: NodeId, server: RpcServer) {
        self.lock().servers.insert(node, server);
    }

    /// Makes a member unreachable as if its process stopped.
    pub fn unregister(&self, node: NodeId) {
        self.lock().servers.remove(&node);
    }

    /// Splits the members into groups that cannot talk to each other (links inside a group
    /// are untouched). Adds to any partition already in force.
    pub fn partition(&self, groups: &[&[NodeId]]) {
        let mut s = self.lock();
        for (i, a) in groups.iter().enumerate() {
            for (j, b) in groups.iter().enumerate() {
                if i != j {
                    for x in a.iter() {
                        for y in b.iter() {
                            s.blocked.insert((*x, *y));
                        }
                    }
                }
            }
        }
    }

    /// Cuts `node` off from every other member.
    pub fn isolate(&self, node: NodeId) {
        self.lock().isolated.insert(node);
    }

    /// Blocks one direction of one link.
    pub fn block_link(&self, from: NodeId, to: NodeId) {
        self.lock().blocked.insert((from, to));
    }

    /// Adds `ms` of latency to the link `from → to` (requests on it, responses on the way back).
    pub fn set_delay_ms(&self, from: NodeId, to: NodeId, ms: u64) {
        self.lock().delay_ms.insert((from, to), ms);
    }

    /// Drops requests with probability `per_mille / 1000`.
    pub fn set_drop_per_mille(&self, per_mille: u32) {
        self.lock().drop_per_mille = per_mille.min(1000);
    }

    /// Removes every fault (partitions, isolation, delays, drops).
    pub fn heal(&self) {
        let mut s = self.lock();
        s.blocked.clear();
        s.isolated.clear();
        s.delay_ms.clear();
        s.drop_per_mille = 0;
    }

    /// What the router has done so far.
    pub fn stats(&self) -> RouterStats {
        self.lock().stats
    }

    fn unreachable(from: NodeId, to: NodeId, why: &str) -> DirectoryError {
        DirectoryError::Unreachable {
            node: to,
            reason: format!("{why} (from {from})"),
        }
    }
}

impl FrameTransport for InMemoryRouter {
    fn call<'a>(
        &'a self,
        from: NodeId,
        to: NodeId,
        _addr: &'a str,
        frame: Vec<u8>,
    ) -> BoxFuture<'a, Result<Vec<u8>, DirectoryError>> {
        Box::pin(async move {
            let (server, delay) = {
                let mut s = self.lock();
                if s.cut(from, to) {
                    s.stats.refused += 1;
                    return Err(Self::unreachable(from, to, "partitioned"));
                }
                if s.drop_per_mille > 0 && s.roll() < s.drop_per_mille {
                    s.stats.dropped += 1;
                    return Err(Self::unreachable(from, to, "dropped"));
                }
                let Some(server) = s.servers.get(&to).cloned() else {
                    s.stats.not_running += 1;
                    return Err(Self::unreachable(from, to, "not running"));
                };
                (server, s.delay_ms.get(&(from, to)).copied().unwrap_or(0))
            };
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let resp = server.handle_frame(&frame).await?;
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let mut s = self.lock();
            // A partition that started while the request was being served loses the answer.
            if s.cut(to, from) || !s.servers.contains_key(&to) {
                s.stats.refused += 1;
                return Err(Self::unreachable(from, to, "response lost"));
            }
            s.stats.delivered += 1;
            Ok(resp)
        })
    }
}
