//! Coalescing one node's ownership records into Raft entries bounded in size and delay.
//!
//! [`BatchQueue`] is the logic, with no clock and no I/O: records go in, and a batch comes out
//! when it holds `batch_records_max` records or when its oldest record has waited
//! `batch_delay_ms_max`. Within a batch the last operation on a `(block, tier)` wins (a claim
//! followed by a release is a release), so claims and releases of one batch never overlap and
//! their order inside the entry does not matter.
//!
//! [`Batcher`] drives a queue from a task (pipelined): callers await the commit of the entry
//! that carried their record. Whatever is pending is proposed as soon as a pipeline slot is
//! free (at most `batch_inflight_max` entries in flight): a caller never waits out a batching
//! delay, nor a round of someone else's entry. While every slot is taken, records gather into
//! the next entry, which goes once a slot frees, or takes one at once when full; so entries
//! grow with the load. Grouping across rounds is the leader's job: it merges the writes that
//! reach it together into one entry ([`crate::merge`]), which is what bounds the entries per
//! round (each entry costs a Raft round and a log write on every member, whatever its size).
//! Two entries in flight together never touch the same `(block, tier)` record or chunk key (a
//! later one waits), so however the leader orders concurrent proposals, every record ends as
//! its last operation left it. Back-pressure: the request channel is bounded by
//! `batch_queue_max`, and the task stops taking requests while full batches wait for slots.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use kvfabric_store::{BlockId, Tier};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::command::OwnershipBatch;
use crate::config::DirectoryConfig;
use crate::directory::{Committed, Directory};
use crate::error::DirectoryError;
use crate::ids::{ChunkKey, Epoch, NodeId};

/// One ownership record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnershipRecord {
    /// The node now holds `block` in `tier` (and `chunk`, if given, names it).
    Claim {
        /// The block.
        block: BlockId,
        /// Where it sits.
        tier: Tier,
        /// A chunk key naming it.
        chunk: Option<ChunkKey>,
    },
    /// The node no longer holds `block` in `tier`.
    Release {
        /// The block.
        block: BlockId,
        /// Where it sat.
        tier: Tier,
    },
}

/// The pure batching logic for one node incarnation.
#[derive(Debug, Clone)]
pub struct BatchQueue {
    node: NodeId,
    epoch: Epoch,
    records_max: usize,
    delay_ms_max: u64,
    /// `true` = claim, `false` = release; last one wins.
    ops: BTreeMap<(BlockId, Tier), bool>,
    chunks: BTreeMap<ChunkKey, BlockId>,
    oldest_ms: Option<u64>,
}

impl BatchQueue {
    /// An empty queue with the config's bounds.
    pub fn new(node: NodeId, epoch: Epoch, config: &DirectoryConfig) -> BatchQueue {
        BatchQueue {
            node,
            epoch,
            records_max: config.batch_records_max,
            delay_ms_max: config.batch_delay_ms_max,
            ops: BTreeMap::new(),
            chunks: BTreeMap::new(),
            oldest_ms: None,
        }
    }

    /// Records pending (after coalescing).
    pub fn len(&self) -> usize {
        self.ops.len() + self.chunks.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records this one would add (coalescing adds nothing for a key already pending).
    fn growth(&self, record: &OwnershipRecord) -> usize {
        match record {
            OwnershipRecord::Claim { block, tier, chunk } => {
                usize::from(!self.ops.contains_key(&(*block, *tier)))
                    + chunk.map_or(0, |c| usize::from(!self.chunks.contains_key(&c)))
            }
            OwnershipRecord::Release { block, tier } => {
                usize::from(!self.ops.contains_key(&(*block, *tier)))
            }
        }
    }

    /// Adds a record at time `now_ms`; returns the batches it completed, oldest first (at
    /// most two). A record that does not fit the pending batch first flushes it, so no batch
    /// exceeds `records_max`; the record itself is in the last batch returned exactly when the
    /// queue is empty afterwards.
    pub fn push(&mut self, record: OwnershipRecord, now_ms: u64) -> Vec<OwnershipBatch> {
        let mut out = Vec::new();
        if !self.is_empty() && self.len() + self.growth(&record) > self.records_max {
            out.extend(self.take());
        }
        if self.oldest_ms.is_none() {
            self.oldest_ms = Some(now_ms);
        }
        match record {
            OwnershipRecord::Claim { block, tier, chunk } => {
                self.ops.insert((block, tier), true);
                if let Some(c) = chunk {
                    self.chunks.insert(c, block);
                }
            }
            OwnershipRecord::Release { block, tier } => {
                self.ops.insert((block, tier), false);
            }
        }
        if self.len() >= self.records_max {
            out.extend(self.take());
        }
        out
    }

    /// When the pending batch must be proposed at the latest.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.oldest_ms.map(|t| t + self.delay_ms_max)
    }

    /// The pending batch if its oldest record has waited `delay_ms_max`.
    pub fn due(&mut self, now_ms: u64) -> Option<OwnershipBatch> {
        match self.deadline_ms() {
            Some(d) if now_ms >= d => self.take(),
            _ => None,
        }
    }

    /// Takes whatever is pending as one batch.
    pub fn take(&mut self) -> Option<OwnershipBatch> {
        if self.is_empty() {
            self.oldest_ms = None;
            return None;
        }
        let mut batch = OwnershipBatch {
            node: self.node,
            epoch: self.epoch,
            ..OwnershipBatch::default()
        };
        for ((block, tier), claim) in std::mem::take(&mut self.ops) {
            if claim {
                batch.claims.push((block, tier));
            } else {
                batch.releases.push((block, tier));
            }
        }
        batch.chunks = std::mem::take(&mut self.chunks).into_iter().collect();
        self.oldest_ms = None;
        Some(batch)
    }
}

struct Request {
    record: OwnershipRecord,
    done: oneshot::Sender<Result<Committed, DirectoryError>>,
}

/// A task that batches one node incarnation's records into the directory.
#[derive(Debug)]
pub struct Batcher {
    tx: mpsc::Sender<Request>,
    task: JoinHandle<()>,
}

impl Batcher {
    /// Starts batching for `node` at `epoch` through `directory`.
    pub fn spawn(directory: Directory, node: NodeId, epoch: Epoch) -> Batcher {
        let config = directory.config().clone();
        let (tx, rx) = mpsc::channel(config.batch_queue_max);
        let queue = BatchQueue::new(node, epoch, &config);
        let task = tokio::spawn(run(directory, queue, rx));
        Batcher { tx, task }
    }

    /// Queues a record and waits for the entry that carries it to commit.
    pub async fn submit(&self, record: OwnershipRecord) -> Result<Committed, DirectoryError> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Request { record, done })
            .await
            .map_err(|_| DirectoryError::BatcherClosed)?;
        wait.await.map_err(|_| DirectoryError::BatcherClosed)?
    }

    /// Claims `block` in `tier` (optionally naming it by `chunk`).
    pub async fn claim(
        &self,
        block: BlockId,
        tier: Tier,
        chunk: Option<ChunkKey>,
    ) -> Result<Committed, DirectoryError> {
        self.submit(OwnershipRecord::Claim { block, tier, chunk })
            .await
    }

    /// Releases `block` from `tier`.
    pub async fn release(&self, block: BlockId, tier: Tier) -> Result<Committed, DirectoryError> {
        self.submit(OwnershipRecord::Release { block, tier }).await
    }

    /// Stops accepting records, proposes what is pending and waits for the task to end.
    pub async fn close(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

type Waiters = Vec<oneshot::Sender<Result<Committed, DirectoryError>>>;

/// The records an entry in flight touches: a later entry touching any of them waits for it,
/// so that two entries whose commit order matters are never in flight together.
#[derive(Debug, Default)]
struct Touched {
    records: BTreeSet<(BlockId, Tier)>,
    chunks: BTreeSet<ChunkKey>,
}

impl Touched {
    fn of(batch: &OwnershipBatch) -> Touched {
        Touched {
            records: batch
                .claims
                .iter()
                .chain(&batch.releases)
                .copied()
                .collect(),
            chunks: batch.chunks.iter().map(|(c, _)| *c).collect(),
        }
    }

    fn overlaps(&self, batch: &OwnershipBatch) -> bool {
        batch
            .claims
            .iter()
            .chain(&batch.releases)
            .any(|r| self.records.contains(r))
            || batch.chunks.iter().any(|(c, _)| self.chunks.contains(c))
    }
}

/// The batcher task's state: the queue, full batches waiting for a pipeline slot, and the
/// entries in flight.
struct Pipeline {
    dir: Directory,
    queue: BatchQueue,
    /// Callers whose records are in `queue`.
    waiters: Waiters,
    /// Full batches, oldest first, waiting for a slot.
    ready: VecDeque<(OwnershipBatch, Waiters)>,
    in_flight: JoinSet<u64>,
    touched: BTreeMap<u64, Touched>,
    next: u64,
    depth: usize,
}

impl Pipeline {
    /// Queues one caller's record; batches it completes wait in `ready`.
    fn accept(&mut self, req: Request, now_ms: u64) {
        let batches = self.queue.push(req.record, now_ms);
        let carried = self.queue.is_empty();
        let count = batches.len();
        let mut done = Some(req.done);
        for (i, batch) in batches.into_iter().enumerate() {
            if i + 1 == count && carried {
                self.waiters.extend(done.take());
            }
            self.ready
                .push_back((batch, std::mem::take(&mut self.waiters)));
        }
        self.waiters.extend(done);
    }

    fn conflicts(&self, batch: &OwnershipBatch) -> bool {
        self.touched.values().any(|t| t.overlaps(batch))
    }

    /// Proposes, while slots are free: full (or due) batches in order, then whatever is
    /// pending. A batch that touches a record of an entry in flight waits for that entry, and
    /// so does everything behind it.
    fn propose(&mut self) {
        while self.in_flight.len() < self.depth {
            if let Some((batch, _)) = self.ready.front() {
                if self.conflicts(batch) {
                    return;
                }
                let (batch, waiters) = self.ready.pop_front().expect("checked above");
                self.start(batch, waiters);
                continue;
            }
            // A partial batch takes a free slot at once (the leader merges what arrives
            // together); records gather only while every slot is taken.
            let Some(batch) = self.queue.take() else {
                return;
            };
            if self.conflicts(&batch) {
                // Back into the queue unchanged: it is retried when an entry lands.
                self.ready
                    .push_front((batch, std::mem::take(&mut self.waiters)));
                return;
            }
            let waiters = std::mem::take(&mut self.waiters);
            self.start(batch, waiters);
        }
    }

    fn start(&mut self, batch: OwnershipBatch, waiters: Waiters) {
        let slot = self.next;
        self.next += 1;
        self.touched.insert(slot, Touched::of(&batch));
        let dir = self.dir.clone();
        self.in_flight.spawn(async move {
            flush(&dir, batch, waiters).await;
            slot
        });
    }

    fn idle(&self) -> bool {
        self.queue.is_empty() && self.ready.is_empty() && self.in_flight.is_empty()
    }
}

async fn run(dir: Directory, queue: BatchQueue, mut rx: mpsc::Receiver<Request>) {
    let start = Instant::now();
    let now_ms = || start.elapsed().as_millis() as u64;
    let depth = dir.config().batch_inflight_max.max(1);
    let mut p = Pipeline {
        dir,
        queue,
        waiters: Vec::new(),
        ready: VecDeque::new(),
        in_flight: JoinSet::new(),
        touched: BTreeMap::new(),
        next: 0,
        depth,
    };
    let mut open = true;
    loop {
        // Take every request already queued, so that they share the next entry; stop taking
        // while full batches wait for slots (the bounded channel pushes back on callers).
        while open && p.ready.len() < depth {
            match rx.try_recv() {
                Ok(req) => p.accept(req, now_ms()),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        p.propose();
        if !open && p.idle() {
            return;
        }
        let deadline = p
            .queue
            .deadline_ms()
            .map(|d| start + Duration::from_millis(d));
        tokio::select! {
            r = rx.recv(), if open && p.ready.len() < depth => match r {
                Some(req) => p.accept(req, now_ms()),
                None => open = false,
            },
            Some(done) = p.in_flight.join_next(), if !p.in_flight.is_empty() => {
                match done {
                    Ok(slot) => {
                        p.touched.remove(&slot);
                    }
                    Err(e) => {
                        // A flush task cannot panic short of a bug; its waiters see the
                        // batcher closed. Forget every slot it could have held.
                        tracing::error!(error = %e, "an ownership flush task failed");
                        p.touched.clear();
                    }
                }
            }
            // The pending batch is due while entries are in flight: it takes the next free slot.
            _ = sleep_until_opt(deadline), if deadline.is_some() && !p.in_flight.is_empty() => {
                if let Some(batch) = p.queue.due(now_ms()) {
                    p.ready.push_back((batch, std::mem::take(&mut p.waiters)));
                }
            }
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn flush(dir: &Directory, batch: OwnershipBatch, waiters: Waiters) {
    let records = batch.len();
    let result = dir.update_ownership(batch).await;
    tracing::debug!(records, ok = result.is_ok(), "ownership batch proposed");
    for w in waiters {
        let _ = w.send(result.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(records: usize, delay: u64) -> DirectoryConfig {
        DirectoryConfig {
            batch_records_max: records,
            batch_delay_ms_max: delay,
            ..DirectoryConfig::default()
        }
    }

    fn claim(i: u8) -> OwnershipRecord {
        OwnershipRecord::Claim {
            block: BlockId([i; 32]),
            tier: Tier::Host,
            chunk: None,
        }
    }

    #[test]
    fn size_bound_flushes_full_batches() {
        let mut q = BatchQueue::new(NodeId(1), Epoch(1), &cfg(4, 1_000));
        let mut batches = Vec::new();
        for i in 0..10 {
            batches.extend(q.push(claim(i), 0));
        }
        assert_eq!(
            batches.iter().map(|b| b.len()).collect::<Vec<_>>(),
            vec![4, 4]
        );
        assert_eq!(q.take().map(|b| b.len()), Some(2));
        assert!(q.take().is_none());
    }

    #[test]
    fn chunks_count_and_never_overflow() {
        let mut q = BatchQueue::new(NodeId(1), Epoch(1), &cfg(5, 1_000));
        let mut sizes = Vec::new();
        for i in 0..20u8 {
            let r = OwnershipRecord::Claim {
                block: BlockId([i; 32]),
                tier: Tier::Disk,
                chunk: Some(ChunkKey([i; 32])),
            };
            sizes.extend(q.push(r, 0).iter().map(|b| b.len()));
        }
        assert!(sizes.iter().all(|s| *s <= 5), "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>() + q.len(), 40);
    }

    #[test]
    fn delay_bound_releases_a_partial_batch() {
        let mut q = BatchQueue::new(NodeId(1), Epoch(1), &cfg(100, 5));
        assert!(q.push(claim(1), 10).is_empty());
        assert!(q.push(claim(2), 12).is_empty());
        assert_eq!(q.deadline_ms(), Some(15));
        assert!(q.due(14).is_none());
        assert_eq!(q.due(15).map(|b| b.len()), Some(2));
        assert_eq!(q.deadline_ms(), None);
    }

    #[test]
    fn last_operation_on_a_record_wins() {
        let mut q = BatchQueue::new(NodeId(1), Epoch(1), &cfg(100, 5));
        q.push(claim(1), 0);
        q.push(
            OwnershipRecord::Release {
                block: BlockId([1; 32]),
                tier: Tier::Host,
            },
            0,
        );
        q.push(claim(2), 0);
        let b = q.take().unwrap();
        assert_eq!(b.claims, vec![(BlockId([2; 32]), Tier::Host)]);
        assert_eq!(b.releases, vec![(BlockId([1; 32]), Tier::Host)]);
    }
}
