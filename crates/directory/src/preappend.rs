//! Early replication: the leader's new entries go to the voters while its own write is on disk.
//!
//! openraft 0.9 replicates an entry only once the leader's own log write has been flushed (its
//! core awaits the flush inside `append_to_log` before it runs the command that replicates), so
//! one Raft round is the leader's `fdatasync`, then the append-entries, then a follower's
//! `fdatasync`, in series. Here the leader's log store hands each append to a [`Tap`] as soon
//! as the entries are staged; [`spawn`] sends them to every other voter at once as an ordinary
//! AppendEntries request carrying the leader's committed vote (a *pre-append*). A follower runs
//! it through its own Raft core like any append-entries — the vote check, the log-consistency
//! check, the write and its flush — so when openraft's own request for the same entries comes,
//! the follower already holds them on disk and answers without a write of its own. The two
//! syncs of a round overlap, as in etcd.
//!
//! Safety rests on Raft itself, not on this module: a pre-append is a message the leader of that
//! term could have sent, and followers must already tolerate such messages duplicated,
//! delayed and reordered (entries that match are never truncated; one that conflicts is
//! refused or replaces an uncommitted suffix, exactly as from openraft's own replication). The
//! leader's own progress still moves only when its flush completes, so an entry is committed
//! only once a majority holds it on disk. `leader_commit` is left empty: a pre-append never
//! moves a follower's commit index.
//!
//! One thing Raft assumes that openraft 0.9 alone does not give once entries leave before the
//! leader's write: that a leader never writes a second entry under an id it already sent. A
//! leader killed before its write reached the disk has lost entries its voters hold, and
//! openraft restarts a member whose saved vote is its own committed one as leader of the same
//! term, whose next entries would take the lost ones' ids. The log store therefore hands the
//! vote back uncommitted on open (`storage::log_store`, `read_vote`): a restarted member
//! starts as a follower and leads again only after an election, in a later term. Tested by
//! `crash_tests`, whose killed members lose every write they had not made.
//!
//! Sent once: when openraft's own request carries entries a voter has already accepted in a
//! pre-append under the same vote, [`Marks`] lets the network send it as what it then
//! amounts to — a check that the voter holds the last of them (`prev_log_id` = that entry, no
//! entries), answered the same way — so the entries cross the network once. By Raft's log
//! matching a voter that holds the leader's entry at an index holds all of the leader's entries
//! below it, and under one vote it never drops an entry it flushed. Should a voter answer the
//! check with a conflict all the same, it loses its mark and openraft's request goes as it is
//! (openraft itself stops on a voter whose log went back: it does not allow that).
//!
//! Bounded and best-effort: one request in flight per voter, queued appends merged into one
//! request when contiguous, at most [`QUEUE_MAX`] appends queued per voter (more are dropped and
//! counted: openraft's replication carries them anyway), a failed call drops what is queued
//! for that voter. [`PreappendStats`] counts every outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use openraft::{ServerState, Vote};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::ids::NodeId;
use crate::network::{FramedNetwork, FramedNetworkFactory};
use crate::type_config::{Entry, LogId, Raft, TypeConfig};

/// Appends queued towards one voter before further ones are dropped.
pub const QUEUE_MAX: usize = 64;
/// Most entries merged into one pre-append request.
const MERGE_ENTRIES_MAX: usize = 64;

/// One append of the leader's: the entry before it and the entries.
#[derive(Clone)]
pub(crate) struct Appended {
    prev: Option<LogId>,
    entries: Vec<Entry>,
}

impl Appended {
    fn last(&self) -> Option<LogId> {
        self.entries.last().map(|e| e.log_id).or(self.prev)
    }

    fn term(&self) -> u64 {
        self.entries.first().map_or(0, |e| e.log_id.leader_id.term)
    }
}

/// Counters of a member's pre-appends (all zero on a member that has not led).
#[derive(Debug, Default)]
pub struct PreappendStats {
    /// Requests a voter accepted.
    pub accepted: AtomicU64,
    /// Requests a voter refused (a conflicting log or a newer vote).
    pub refused: AtomicU64,
    /// Requests that failed on the way (unreachable, timed out, too large).
    pub failed: AtomicU64,
    /// Appends not sent: the voter's queue was full, or dropped after a failed call.
    pub dropped: AtomicU64,
    /// openraft requests sent without their entries, the voter holding them already.
    pub elided: AtomicU64,
}

/// A snapshot of [`PreappendStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreappendCounts {
    /// Requests a voter accepted.
    pub accepted: u64,
    /// Requests a voter refused.
    pub refused: u64,
    /// Requests that failed on the way.
    pub failed: u64,
    /// Appends not sent.
    pub dropped: u64,
    /// openraft requests sent without their entries.
    pub elided: u64,
}

impl PreappendStats {
    /// The counters now.
    pub fn counts(&self) -> PreappendCounts {
        PreappendCounts {
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            elided: self.elided.load(Ordering::Relaxed),
        }
    }
}

/// What each voter is known to hold from pre-appends: under which vote, up to which index.
pub struct Marks {
    held: Mutex<BTreeMap<NodeId, (Vote<NodeId>, u64)>>,
    stats: Arc<PreappendStats>,
}

impl Marks {
    /// Marks counted into `stats`.
    pub(crate) fn new(stats: Arc<PreappendStats>) -> Marks {
        Marks {
            held: Mutex::default(),
            stats,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, (Vote<NodeId>, u64)>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `voter` accepted, under `vote`, a pre-append ending at `last`.
    pub(crate) fn accepted(&self, voter: NodeId, vote: Vote<NodeId>, last: LogId) {
        let mut held = self.held();
        match held.get_mut(&voter) {
            Some((v, upto)) if *v == vote => *upto = (*upto).max(last.index),
            _ => {
                held.insert(voter, (vote, last.index));
            }
        }
    }

    /// The request to send instead of `req` to `voter`: the check that it holds the last of
    /// the entries, when it accepted them all under the same vote; `None` to send `req`.
    pub(crate) fn elide(
        &self,
        voter: NodeId,
        req: &AppendEntriesRequest<TypeConfig>,
    ) -> Option<AppendEntriesRequest<TypeConfig>> {
        let last = req.entries.last()?.log_id;
        let (vote, upto) = *self.held().get(&voter)?;
        if vote != req.vote || last.index > upto {
            return None;
        }
        self.stats.elided.fetch_add(1, Ordering::Relaxed);
        Some(AppendEntriesRequest {
            vote: req.vote,
            prev_log_id: Some(last),
            entries: Vec::new(),
            leader_commit: req.leader_commit,
        })
    }

    /// `voter` refused a check: it no longer holds what it accepted (send it everything).
    pub(crate) fn forget(&self, voter: NodeId) {
        self.held().remove(&voter);
    }
}

/// Where a member's log store hands the appends of entries this member proposed as leader.
pub(crate) struct Tap {
    me: NodeId,
    tx: mpsc::UnboundedSender<Appended>,
}

impl Tap {
    /// Offers an append: `prev` is the log's last id before it. Entries another leader
    /// proposed (this member is following) are not offered; nor is anything after [`spawn`]'s
    /// task has stopped.
    pub(crate) fn offer(&self, prev: Option<LogId>, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        if first.log_id.leader_id.node_id != self.me
            || prev.map_or(0, |p| p.index + 1) != first.log_id.index
        {
            return;
        }
        let _ = self.tx.send(Appended {
            prev,
            entries: entries.to_vec(),
        });
    }
}

/// Starts member `me`'s pre-append task for `raft`, calling its voters through `network`
/// with each request bounded by `rpc_timeout`. Returns the tap to install in the log store
/// and the task (it ends when `shutdown` turns true or the tap is dropped).
pub(crate) fn spawn(
    me: NodeId,
    raft: Raft,
    network: FramedNetworkFactory,
    rpc_timeout: Duration,
    stats: Arc<PreappendStats>,
    marks: Arc<Marks>,
    mut shutdown: watch::Receiver<bool>,
) -> (Tap, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Appended>();
    let task = tokio::spawn(async move {
        let mut fanout = Fanout {
            me,
            network,
            rpc_timeout,
            stats,
            marks,
            voters: BTreeMap::new(),
        };
        loop {
            tokio::select! {
                a = rx.recv() => match a {
                    Some(a) => fanout.dispatch(&raft, a).await,
                    None => break,
                },
                _ = shutdown.changed() => break,
            }
        }
    });
    (Tap { me, tx }, task)
}

/// The dispatcher's state: one queue and one sender task per voter.
struct Fanout {
    me: NodeId,
    network: FramedNetworkFactory,
    rpc_timeout: Duration,
    stats: Arc<PreappendStats>,
    marks: Arc<Marks>,
    voters: BTreeMap<NodeId, Voter>,
}

struct Voter {
    addr: String,
    vote: Vote<NodeId>,
    tx: mpsc::Sender<Appended>,
}

impl Fanout {
    /// Queues `a` towards every other voter, if this member still leads in the term that
    /// proposed it.
    async fn dispatch(&mut self, raft: &Raft, a: Appended) {
        let (vote, targets) = {
            let m = raft.metrics();
            let m = m.borrow();
            let vote = Vote::new_committed(a.term(), self.me);
            if m.state != ServerState::Leader || m.vote != vote {
                return;
            }
            let membership = m.membership_config.membership();
            let targets: Vec<(NodeId, String)> = membership
                .voter_ids()
                .filter(|id| *id != self.me)
                .filter_map(|id| membership.get_node(&id).map(|n| (id, n.addr.clone())))
                .collect();
            (vote, targets)
        };
        let live: BTreeSet<NodeId> = targets.iter().map(|(id, _)| *id).collect();
        self.voters.retain(|id, _| live.contains(id));
        let mut a = Some(a);
        let count = targets.len();
        for (i, (id, addr)) in targets.into_iter().enumerate() {
            // The last voter takes the append itself; the others a copy.
            let item = if i + 1 == count { a.take() } else { a.clone() };
            let item = item.expect("present until the last voter takes it");
            let voter = match self.voters.get(&id) {
                Some(v) if v.addr == addr && v.vote == vote && !v.tx.is_closed() => v,
                _ => {
                    let v = self.start_voter(id, &addr, vote).await;
                    self.voters.insert(id, v);
                    &self.voters[&id]
                }
            };
            if voter.tx.try_send(item).is_err() {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn start_voter(&mut self, id: NodeId, addr: &str, vote: Vote<NodeId>) -> Voter {
        let node = openraft::BasicNode {
            addr: addr.to_string(),
        };
        let net = self.network.new_client(id, &node).await;
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(send_loop(
            net,
            Sender {
                voter: id,
                vote,
                rpc_timeout: self.rpc_timeout,
                stats: self.stats.clone(),
                marks: self.marks.clone(),
            },
            rx,
        ));
        Voter {
            addr: addr.to_string(),
            vote,
            tx,
        }
    }
}

/// Sends one voter's queued appends, one request at a time, contiguous ones merged. A queue
/// serves one vote: the dispatcher gives a later term a new queue (this one ends once dropped).
struct Sender {
    voter: NodeId,
    vote: Vote<NodeId>,
    rpc_timeout: Duration,
    stats: Arc<PreappendStats>,
    marks: Arc<Marks>,
}

async fn send_loop(mut net: FramedNetwork, to: Sender, mut rx: mpsc::Receiver<Appended>) {
    let Sender {
        voter,
        vote,
        rpc_timeout,
        stats,
        marks,
    } = to;
    while let Some(mut batch) = rx.recv().await {
        let mut held = None;
        while batch.entries.len() < MERGE_ENTRIES_MAX {
            match rx.try_recv() {
                Ok(next) if next.prev == batch.last() => batch.entries.extend(next.entries),
                Ok(next) => {
                    held = Some(next);
                    break;
                }
                Err(_) => break,
            }
        }
        let mut failed = false;
        for a in std::iter::once(batch).chain(held) {
            if failed {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let last = a.last();
            let req = AppendEntriesRequest {
                vote,
                prev_log_id: a.prev,
                entries: a.entries,
                leader_commit: None,
            };
            match net.send(req, RPCOption::new(rpc_timeout)).await {
                Ok(AppendEntriesResponse::Success) => {
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    if let Some(last) = last {
                        marks.accepted(voter, vote, last);
                    }
                }
                Ok(_) => {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    // The voter is slow or gone: what is queued would only wait behind it.
                    failed = true;
                    while rx.try_recv().is_ok() {
                        stats.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}
