//! Merging ownership writes that reach the leader together into one Raft entry.
//!
//! Every node's batcher coalesces its own records into one entry per round, so a cluster of
//! N nodes sealing blocks proposes N entries per round, and each entry costs a log write on
//! every member and a slot in every append-entries request, whatever its size. The leader's
//! [`WriteMerger`] turns the ownership writes that arrive while one of its entries is in
//! flight into a single [`Command::Merged`] entry (group commit across nodes): a lone write
//! is proposed at once, unmerged; while entries are in flight, writes gather until the group
//! is full (`batch_records_max` records, [`MERGE_REQUESTS_MAX`] requests) — full groups take
//! free pipeline slots (`batch_inflight_max`) — or the pipeline drains.
//!
//! Merging never reorders what matters: each request applies in order inside the entry with
//! its own deduplication, and a node's batcher never has two writes in flight that touch the
//! same record, so however its writes are grouped, every record ends as its last write left it.

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::command::{Command, CommandReply, Request, RequestId};
use crate::rpc::WriteError;
use crate::type_config::Raft;

/// Most requests merged into one entry (bounds the entry's per-request overhead).
pub const MERGE_REQUESTS_MAX: usize = 64;
/// Writes queued towards the merger before callers wait.
const QUEUE_MAX: usize = 1024;

/// The outcome of one write: the entry's log index and the request's own reply.
pub(crate) type WriteResult = Result<(u64, CommandReply), WriteError>;

struct Pending {
    request: Request,
    reply: oneshot::Sender<WriteResult>,
}

/// The handle; the task ends when every handle is gone.
#[derive(Debug, Clone)]
pub(crate) struct WriteMerger {
    tx: mpsc::Sender<Pending>,
}

impl WriteMerger {
    /// Starts the merging task of `raft`. `client` names the merged entries' own request ids
    /// (never deduplicated: only the requests inside are).
    pub(crate) fn spawn(raft: Raft, records_max: usize, depth: usize, client: u64) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(run(raft, rx, records_max.max(1), depth.max(1), client));
        WriteMerger { tx }
    }

    /// Proposes `request` (an ownership batch) merged with whatever arrives alongside it, and
    /// waits for its reply. `None` when the merger is gone (the member is shutting down).
    pub(crate) async fn write(&self, request: Request) -> Option<WriteResult> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Pending { request, reply }).await.ok()?;
        rx.await.ok()
    }
}

/// The group being gathered, and a write that did not fit in it.
struct Group {
    pending: Vec<Pending>,
    records: u64,
    held: Option<Pending>,
    records_max: u64,
}

impl Group {
    fn full(&self) -> bool {
        self.held.is_some()
            || self.records >= self.records_max
            || self.pending.len() >= MERGE_REQUESTS_MAX
    }

    fn push(&mut self, p: Pending) {
        let n = p.request.command.record_count();
        if !self.pending.is_empty() && self.records + n > self.records_max {
            self.held = Some(p);
        } else {
            self.records += n;
            self.pending.push(p);
        }
    }

    fn take(&mut self) -> Vec<Pending> {
        let out = std::mem::take(&mut self.pending);
        self.records = 0;
        if let Some(p) = self.held.take() {
            self.push(p);
        }
        out
    }
}

async fn run(
    raft: Raft,
    mut rx: mpsc::Receiver<Pending>,
    records_max: usize,
    depth: usize,
    client: u64,
) {
    let mut group = Group {
        pending: Vec::new(),
        records: 0,
        held: None,
        records_max: records_max as u64,
    };
    let mut in_flight = JoinSet::new();
    let mut seq = 0u64;
    let mut open = true;
    loop {
        while open && !group.full() {
            match rx.try_recv() {
                Ok(p) => group.push(p),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        let ready = !group.pending.is_empty()
            && (in_flight.is_empty() || (group.full() && in_flight.len() < depth));
        if ready {
            seq += 1;
            let id = RequestId { client, seq };
            in_flight.spawn(propose(raft.clone(), group.take(), id));
            continue;
        }
        if !open && group.pending.is_empty() && in_flight.is_empty() {
            return;
        }
        tokio::select! {
            r = rx.recv(), if open && !group.full() => match r {
                Some(p) => group.push(p),
                None => open = false,
            },
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
        }
    }
}

/// Proposes one group (alone when it is one request, else merged) and answers each caller.
async fn propose(raft: Raft, group: Vec<Pending>, id: RequestId) {
    if group.len() == 1 {
        let p = group.into_iter().next().expect("one request");
        let r = raft.client_write(p.request).await;
        let _ = p.reply.send(r.map(|resp| (resp.log_id.index, resp.data)));
        return;
    }
    let (requests, replies): (Vec<Request>, Vec<_>) =
        group.into_iter().map(|p| (p.request, p.reply)).unzip();
    let n = requests.len();
    let merged = Request {
        id,
        command: Command::Merged(requests),
    };
    match raft.client_write(merged).await {
        Ok(resp) => {
            let index = resp.log_id.index;
            match resp.data {
                CommandReply::Merged(each) if each.len() == n => {
                    for (reply, r) in replies.into_iter().zip(each) {
                        let _ = reply.send(Ok((index, r)));
                    }
                }
                // The state machine answers a merged entry with one reply per request; any
                // other answer is passed on whole, so a caller never sees a made-up reply.
                other => {
                    tracing::error!(?other, n, "a merged entry got an unexpected reply");
                    for reply in replies {
                        let _ = reply.send(Ok((index, other.clone())));
                    }
                }
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kvfabric_store::{BlockId, ChunkKey};
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::command::OwnershipBatch;
    use crate::config::DirectoryConfig;
    use crate::ids::{Epoch, NodeId};
    use crate::type_config::{Entry, LogId};

    fn request(seq: u64, chunks: u64) -> Request {
        Request {
            id: RequestId {
                client: u64::MAX,
                seq: u64::MAX - seq,
            },
            command: Command::Ownership(OwnershipBatch::claim(
                NodeId(u64::MAX - seq),
                Epoch(u64::MAX),
                Vec::new(),
                (0..chunks)
                    .map(|c| (ChunkKey([c as u8; 32]), BlockId([0xff; 32])))
                    .collect(),
            )),
        }
    }

    fn pending(seq: u64, records: u64) -> (Pending, oneshot::Receiver<WriteResult>) {
        let (reply, rx) = oneshot::channel();
        let request = request(seq, records);
        (Pending { request, reply }, rx)
    }

    #[test]
    fn a_full_merged_entry_fits_the_entry_bound() {
        let config = DirectoryConfig::default();
        let records = config.batch_records_max as u64;
        let n = MERGE_REQUESTS_MAX as u64;
        // The worst case: as many requests as allowed, the records spread so that every
        // request carries at least one, all of them chunk mappings (the largest record).
        let mut requests: Vec<Request> = (0..n - 1).map(|i| request(i, 1)).collect();
        requests.push(request(n, records - (n - 1)));
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(u64::MAX, NodeId(u64::MAX)), u64::MAX),
            payload: EntryPayload::Normal(Request {
                id: RequestId {
                    client: u64::MAX,
                    seq: u64::MAX,
                },
                command: Command::Merged(requests),
            }),
        };
        let bytes =
            bincode::serde::encode_to_vec(&entry, bincode::config::standard()).expect("encodes");
        assert!(
            bytes.len() as u64 <= config.entry_bytes_max(),
            "a full merged entry is {} bytes, over entry_bytes_max {}",
            bytes.len(),
            config.entry_bytes_max()
        );
    }

    #[test]
    fn a_group_is_full_at_its_records_or_requests_and_holds_what_does_not_fit() {
        let mut g = Group {
            pending: Vec::new(),
            records: 0,
            held: None,
            records_max: 10,
        };
        let (a, _ra) = pending(1, 6);
        let (b, _rb) = pending(2, 6);
        g.push(a);
        assert!(!g.full());
        // 12 records would pass the bound: b waits for the next group.
        g.push(b);
        assert!(g.full());
        assert_eq!(g.take().len(), 1);
        assert_eq!(
            (g.pending.len(), g.records),
            (1, 6),
            "the held write leads the next group"
        );
        assert!(!g.full());
        for i in 0..MERGE_REQUESTS_MAX as u64 {
            let (p, _r) = pending(10 + i, 0);
            g.push(p);
        }
        assert!(g.full(), "{} requests fill a group", MERGE_REQUESTS_MAX);
        // A write larger than the bound on its own still goes, alone.
        g.take();
        g.take();
        let (big, _rbig) = pending(99, 25);
        g.push(big);
        assert_eq!((g.pending.len(), g.records), (1, 25));
    }
}
