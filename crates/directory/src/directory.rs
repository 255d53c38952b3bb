//! [`Directory`]: one member of a directory shard — its Raft, its store, its network seam —
//! and the write API (join, leases, ownership); forwarding to the leader lives in `forward`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::BasicNode;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::command::{Command, CommandReply, OwnershipBatch, Request};
use crate::config::DirectoryConfig;
use crate::election::ElectionSignals;
use crate::error::DirectoryError;
use crate::ids::{Epoch, NodeId, ShardId};
use crate::network::{FrameTransport, FramedNetworkFactory, RpcServer};
use crate::preappend::{Marks, PreappendCounts, PreappendStats};
use crate::request_ids::RequestIds;
use crate::rpc::{ForwardRequest, ForwardResponse};
use crate::storage::{open_store, LogStore, ShardView, SnapshotTrigger};
use crate::type_config::{Raft, RaftMetrics};

/// A committed command: where it sits in the log and what applying it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Its log index.
    pub log_index: u64,
    /// The state machine's reply (never `Rejected` when returned by the typed helpers).
    pub reply: CommandReply,
}

pub(crate) struct Inner {
    pub(crate) id: NodeId,
    pub(crate) shard: ShardId,
    pub(crate) config: DirectoryConfig,
    pub(crate) raft: Raft,
    pub(crate) view: ShardView,
    pub(crate) log: LogStore,
    pub(crate) transport: Arc<dyn FrameTransport>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) server: RpcServer,
    /// What the RPC seam saw that bears on standing for election (`election`).
    pub(crate) election: Arc<ElectionSignals>,
    /// What this member's early replication did (`preappend`).
    preappends: Arc<PreappendStats>,
    /// This handle's request ids for deduplication.
    pub(crate) ids: Arc<RequestIds>,
    shutdown: watch::Sender<bool>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    #[cfg(any(test, feature = "planted-bug-stale-read"))]
    pub(crate) planted_stale_read: std::sync::atomic::AtomicBool,
}

/// One member of one directory shard. Cheap to clone; clones share the member.
#[derive(Clone)]
pub struct Directory {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("id", &self.inner.id)
            .field("shard", &self.inner.shard)
            .finish_non_exhaustive()
    }
}

impl Directory {
    /// Opens the store at `path` (creating it if absent), starts the Raft member `id` of
    /// `shard` and its lease ticker. A member whose store already holds a log resumes from it;
    /// a new cluster still needs [`Directory::initialize`] on one member.
    pub async fn open(
        id: NodeId,
        shard: ShardId,
        path: &Path,
        config: DirectoryConfig,
        transport: Arc<dyn FrameTransport>,
        clock: Arc<dyn Clock>,
    ) -> Result<Directory, DirectoryError> {
        let raft_config = Arc::new(config.raft_config()?);
        let trigger = Arc::new(SnapshotTrigger::new(config.snapshot_records_min));
        let (log, sm) = open_store(path, shard, trigger.clone()).await?;
        let view = sm.view();
        let election = Arc::new(ElectionSignals::new(tokio::time::Instant::now()));
        let lease = std::time::Duration::from_millis(config.election_timeout_max_ms);
        let preappends = Arc::new(PreappendStats::default());
        let marks = Arc::new(Marks::new(preappends.clone()));
        let mut network =
            FramedNetworkFactory::new(id, transport.clone(), config.frame_bytes_max as usize)
                .with_election(election.clone(), lease);
        if config.preappend {
            network = network.with_preappend_marks(marks.clone());
        }
        let raft = Raft::new(id, raft_config, network.clone(), log.clone(), sm)
            .await
            .map_err(|e| DirectoryError::Stopped {
                reason: e.to_string(),
            })?;
        let client = client_nonce(id);
        let server = RpcServer::new(
            raft.clone(),
            &config,
            client.wrapping_add(1),
            election.clone(),
        );
        let (shutdown, _) = watch::channel(false);
        let mut tasks = Vec::new();
        if config.preappend {
            let (tap, task) = crate::preappend::spawn(
                id,
                raft.clone(),
                network,
                std::time::Duration::from_millis(config.rpc_timeout_ms),
                preappends.clone(),
                marks,
                shutdown.subscribe(),
            );
            log.install_preappend(tap);
            tasks.push(task);
        }
        let dir = Directory {
            inner: Arc::new(Inner {
                id,
                shard,
                config,
                raft,
                view,
                log,
                transport,
                clock,
                server,
                election,
                preappends,
                ids: RequestIds::new(client),
                shutdown,
                tasks: std::sync::Mutex::new(Vec::new()),
                #[cfg(any(test, feature = "planted-bug-stale-read"))]
                planted_stale_read: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let ticker = crate::lease::spawn_lease_ticker(&dir, dir.inner.shutdown.subscribe());
        let snapshots = spawn_snapshot_task(&dir, trigger, dir.inner.shutdown.subscribe());
        tasks.extend([ticker, snapshots]);
        if dir.inner.config.prompt_election {
            tasks.push(crate::election::spawn_watchdog(
                Arc::downgrade(&dir.inner),
                dir.inner.shutdown.subscribe(),
            ));
        }
        dir.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(tasks);
        Ok(dir)
    }

    /// Forms a new cluster with `members` (id → RPC address) as voters. Call it on one member
    /// of a brand-new cluster; on a member that already has a log or a vote it does nothing
    /// (without asking openraft, which would log the refusal as an error on every restart).
    pub async fn initialize(
        &self,
        members: BTreeMap<NodeId, String>,
    ) -> Result<(), DirectoryError> {
        if !self.log_store().is_blank() {
            return Ok(());
        }
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode { addr }))
            .collect();
        match self.inner.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(DirectoryError::Membership {
                reason: e.to_string(),
            }),
        }
    }

    /// Plants the replica divergence the chaos harness must catch
    /// ([`crate::storage::ShardView::plant_divergence`]).
    #[cfg(feature = "planted-bug-diverging-replica")]
    pub fn plant_diverging_replica(&self) {
        self.view().plant_divergence();
    }

    /// This member's id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// The shard this member replicates.
    pub fn shard(&self) -> ShardId {
        self.inner.shard
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &DirectoryConfig {
        &self.inner.config
    }

    /// The server to hand incoming request frames to.
    pub fn rpc_server(&self) -> RpcServer {
        self.inner.server.clone()
    }

    /// The applied state, for local reads (see also [`Directory::read`]).
    pub fn view(&self) -> ShardView {
        self.inner.view.clone()
    }

    /// The member's log, for audits.
    pub fn log_store(&self) -> LogStore {
        self.inner.log.clone()
    }

    /// The underlying openraft handle (metrics, triggers).
    pub fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// A snapshot of the Raft metrics.
    pub fn metrics(&self) -> RaftMetrics {
        self.inner.raft.metrics().borrow().clone()
    }

    /// Elections this member started promptly, its leader silent for the lease (see
    /// [`crate::election`]).
    pub fn prompt_elections(&self) -> u64 {
        self.inner
            .election
            .prompted
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Rounds of pre-votes this member asked for that a majority did not grant (see
    /// [`crate::prevote`]).
    pub fn prevotes_refused(&self) -> u64 {
        self.inner
            .election
            .prevotes_refused
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What this member's early replication did while it led (see [`crate::preappend`]).
    pub fn preappends(&self) -> PreappendCounts {
        self.inner.preappends.counts()
    }

    /// The leader this member currently knows of.
    pub fn current_leader(&self) -> Option<NodeId> {
        self.inner.raft.metrics().borrow().current_leader
    }

    /// Stops the member: the lease ticker, then Raft. The store is closed once every clone of
    /// this `Directory` (and any batcher holding one) is dropped.
    pub async fn shutdown(&self) -> Result<(), DirectoryError> {
        let _ = self.inner.shutdown.send(true);
        let tasks: Vec<_> =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| DirectoryError::Stopped {
                reason: e.to_string(),
            })
    }

    // ---- writes ----

    /// Starts an incarnation of `node`: returns its new epoch. Its lease runs `lease_ms` from
    /// now on this member's clock.
    pub async fn join(&self, node: NodeId) -> Result<Epoch, DirectoryError> {
        let until_ms = self.inner.clock.now_ms() + self.inner.config.lease_ms;
        match self
            .submit_checked(Command::Join { node, until_ms })
            .await?
            .reply
        {
            CommandReply::Joined { epoch, .. } => Ok(epoch),
            other => Err(unexpected("Joined", &other)),
        }
    }

    /// Extends `node`'s lease to `lease_ms` from now; returns the new end.
    pub async fn renew_lease(&self, node: NodeId, epoch: Epoch) -> Result<u64, DirectoryError> {
        let until_ms = self.inner.clock.now_ms() + self.inner.config.lease_ms;
        let cmd = Command::RenewLease {
            node,
            epoch,
            until_ms,
        };
        match self.submit_checked(cmd).await?.reply {
            CommandReply::LeaseRenewed { until_ms } => Ok(until_ms),
            other => Err(unexpected("LeaseRenewed", &other)),
        }
    }

    /// Applies one ownership batch (claims, releases, chunk mappings) as one entry. Batches
    /// larger than `batch_records_max` are refused before anything is proposed.
    pub async fn update_ownership(
        &self,
        batch: OwnershipBatch,
    ) -> Result<Committed, DirectoryError> {
        if batch.len() > self.inner.config.batch_records_max {
            return Err(DirectoryError::Config {
                field: "batch_records_max",
                expected: format!(
                    "a batch of at most {} records",
                    self.inner.config.batch_records_max
                ),
                found: batch.len().to_string(),
            });
        }
        self.submit_checked(Command::Ownership(batch)).await
    }

    /// Proposes `ExpireLeases` at this member's clock reading (the leader's ticker does this
    /// on its own; this is for operators and tests).
    pub async fn expire_leases(&self) -> Result<Committed, DirectoryError> {
        let now_ms = self.inner.clock.now_ms();
        let keep_chunks_ms = self.inner.config.lease_ms;
        self.submit_checked(Command::ExpireLeases {
            now_ms,
            keep_chunks_ms,
        })
        .await
    }

    /// Proposes `command` and waits until it is committed and applied; a state-machine
    /// rejection becomes [`DirectoryError::Rejected`].
    pub async fn submit_checked(&self, command: Command) -> Result<Committed, DirectoryError> {
        let c = self.submit(command).await?;
        match c.reply {
            CommandReply::Rejected(r) => Err(DirectoryError::Rejected(r)),
            _ => Ok(c),
        }
    }

    /// Proposes `command` through the leader (forwarding when this member is not it) and
    /// waits for it to be applied, within `write_timeout_ms`. Retries after an unknown outcome
    /// (leader lost, response lost) carry the same request id, so the command applies once.
    pub async fn submit(&self, command: Command) -> Result<Committed, DirectoryError> {
        let limit_ms = self.inner.config.write_timeout_ms;
        // Held until this returns: the id stays retryable while it is in flight.
        let ticket = self.inner.ids.issue();
        let request = Request {
            id: ticket.id(),
            command,
        };
        match self
            .on_leader(ForwardRequest::Write(request), limit_ms, "write")
            .await?
        {
            ForwardResponse::Write(Ok((log_index, reply))) => Ok(Committed { log_index, reply }),
            ForwardResponse::Write(Err(e)) => Err(write_error(e)),
            other => Err(DirectoryError::UnexpectedResponse {
                expected: "write",
                found: format!("{other:?}"),
            }),
        }
    }
}

/// Asks Raft for a snapshot whenever `trigger` says one is due, until shutdown.
fn spawn_snapshot_task(
    dir: &Directory,
    trigger: Arc<SnapshotTrigger>,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(&dir.inner);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = trigger.due() => {}
                _ = shutdown.changed() => return,
            }
            let Some(inner) = weak.upgrade() else { return };
            tracing::debug!(member = %inner.id, records = trigger.since(), "snapshot due");
            if let Err(e) = inner.raft.trigger().snapshot().await {
                tracing::warn!(member = %inner.id, error = %e, "snapshot trigger failed");
            }
        }
    })
}

/// A client id for deduplication that no other handle, here or elsewhere, before or after a
/// restart, is likely to draw: a hash of the member id, the wall clock in ns, the process id
/// and an address in this process. (Not the lease clock: a manual clock repeats.)
fn client_nonce(id: NodeId) -> u64 {
    let marker = 0u8;
    let mut h = blake3::Hasher::new();
    h.update(&id.0.to_le_bytes());
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.update(&ns.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(&(std::ptr::addr_of!(marker) as usize).to_le_bytes());
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
}

fn unexpected(expected: &'static str, found: &CommandReply) -> DirectoryError {
    DirectoryError::UnexpectedResponse {
        expected,
        found: format!("{found:?}"),
    }
}

/// Maps Raft's write error (after forwarding gave up following hints).
pub(crate) fn write_error(e: crate::rpc::WriteError) -> DirectoryError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => DirectoryError::NoLeader {
            leader: f.leader_id,
            attempts: 1,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            DirectoryError::Membership {
                reason: e.to_string(),
            }
        }
        RaftError::Fatal(f) => DirectoryError::Stopped {
            reason: f.to_string(),
        },
    }
}
