//! The node as a cluster member: its networks ([`net`]: Raft and control as message channels
//! of the transport), its directory member and incarnation ([`membership`]), the block
//! transport serving its store and taking pushed copies ([`source`]), and the views
//! `/v1/cluster`, `/readyz` and `/metrics` read ([`view`]).
//!
//! Who the members are is the Raft membership's business ([`members`]); it changes at run
//! time one step at a time ([`reconfig`]: a new member joins as a learner, catches up and is
//! promoted; a leaving one is demoted, drains ([`drain`]) and leaves).
//!
//! Start order ([`Cluster::start`]): load the TLS identity; bind the node's one QUIC endpoint
//! (blocks, Raft and control, told apart by ALPN; with `[transport] kind = "ucx"` blocks go
//! over UCX and the QUIC endpoint, at the member's `raft` address, carries Raft and control);
//! open the directory on `data_dir/raft`; the lowest-id member initializes the group with every
//! configured member as a voter (skipped once it has a log); then, in the background, the
//! node joins (a new epoch per start), re-registers the blocks it recovered from disk under
//! that epoch, and renews its lease every `lease_renew_ms`. [`Cluster::assemble`] is the same
//! from networks and a directory built elsewhere (the in-memory ones of deterministic tests).
//!
//! The data path across nodes: a put pushes `replication − 1` verified copies
//! ([`replication`]); a get that misses locally fetches from the block's live owners
//! ([`remote_get`]), and every such fetch is timed into the bandwidth table that
//! `POST /v1/route` prices with ([`bandwidth`], `links`); blocks whose live copies fell
//! below the replication factor get new ones ([`repair`]); the store's tier moves keep owner
//! records' tiers current ([`tier_sync`]).

mod attempt;
pub mod bandwidth;
pub mod control;
mod control_server;
mod dev_certs;
mod dir_keys;
pub(crate) mod drain;
pub(crate) mod health;
mod links;
pub mod members;
pub(crate) mod membership;
pub mod net;
pub(crate) mod offers;
pub mod reconfig;
pub(crate) mod remote_get;
pub(crate) mod repair;
pub(crate) mod replication;
pub(crate) mod source;
pub mod stats;
pub(crate) mod tier_sync;
pub mod view;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use kvfabric_directory::{Clock, Directory, DirectoryError, ShardId};
use kvfabric_transport::{
    Messenger, NodeIdentity, PeerAddr, QuicTransport, Transport, TransportError,
};
use tokio::task::JoinHandle;

use crate::config::{BlockTransport, ClusterConfig, Member};
use crate::ids::NodeId;
use crate::local::LocalNode;
use membership::Incarnation;
use net::{raft_channel, RaftNet, RaftNetCounters, CONTROL_CHANNEL};
use source::StoreSource;

pub(crate) use dir_keys::{block_of_directory, directory_block};

/// The directory's chunk key for `key` put under `ns`: keyed by the namespace, so that one
/// tenant's chunk keys never resolve (or reveal anything) under another's.
pub(crate) fn directory_chunk_key(
    ns: &kvfabric_store::NamespaceKey,
    key: crate::ids::ChunkKey,
) -> kvfabric_directory::ChunkKey {
    kvfabric_directory::ChunkKey(*blake3::keyed_hash(&ns.0, &key.0).as_bytes())
}

/// Why a node could not take its place in the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Development certificates could not be generated.
    #[error("generating development certificates in {dir}: {reason}")]
    DevCerts {
        /// The certs directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// The TLS identity could not be loaded.
    #[error("loading the TLS identity {name} from {dir}: {source}")]
    Identity {
        /// Its name.
        name: String,
        /// The certs directory.
        dir: String,
        /// Why.
        source: Box<TransportError>,
    },
    /// The block transport could not start.
    #[error("starting the block transport on {addr}: {source}")]
    Transport {
        /// The listen address.
        addr: std::net::SocketAddr,
        /// Why.
        source: Box<TransportError>,
    },
    /// The transport chosen is not in this build.
    #[error("[transport] kind = {kind:?}: {reason}")]
    NotBuilt {
        /// The kind asked for.
        kind: &'static str,
        /// Why it cannot run here.
        reason: &'static str,
    },
    /// A channel handler could not be registered.
    #[error("serving {what}: {source}")]
    Channel {
        /// Which channel.
        what: &'static str,
        /// Why.
        source: Box<TransportError>,
    },
    /// The directory could not open or initialize.
    #[error("the directory ({what}): {source}")]
    Directory {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: DirectoryError,
    },
}

/// This node's cluster side.
pub(crate) struct Cluster {
    /// This node.
    pub(crate) me: NodeId,
    /// The validated `[cluster]`.
    pub(crate) config: ClusterConfig,
    /// The directory member.
    pub(crate) directory: Directory,
    /// The lease and liveness clock.
    pub(crate) clock: Arc<dyn Clock>,
    /// This node's store.
    pub(crate) local: Arc<LocalNode>,
    /// The block transport (serves this node's store, fetches from and pushes to peers).
    pub(crate) transport: Arc<dyn Transport>,
    /// Raft and control messages.
    pub(crate) messenger: Arc<dyn Messenger>,
    /// The Raft network's counters.
    pub(crate) raft_counters: Arc<RaftNetCounters>,
    /// Closes the networks at shutdown.
    closers: Vec<Arc<dyn Transport>>,

    /// The current incarnation, once joined.
    pub(crate) incarnation: Arc<Incarnation>,
    /// What re-replication has done.
    pub(crate) repair: repair::RepairCounters,
    /// Tier moves recorded in the directory.
    pub(crate) tier_sync: tier_sync::TierSyncCounters,
    /// Which peers this node suspects dead.
    pub(crate) health: health::PeerHealth,
    /// Measured node-to-node bandwidths (this node's and its peers' reports).
    pub(crate) bandwidth: crate::cluster::bandwidth::BandwidthTable,
    /// Addresses of members not in the config, as they described themselves.
    pub(crate) learned: members::Learned,
    /// This member's drain, when it is leaving.
    pub(crate) drainer: drain::Drainer,
    /// Engine identities offered ahead of pushes to this member.
    pub(crate) offers: offers::Offers,
    /// One membership change at a time through this member.
    pub(crate) reconfig: tokio::sync::Mutex<()>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

/// What a cluster side is assembled from.
pub(crate) struct ClusterParts {
    /// This node.
    pub(crate) me: NodeId,
    /// The validated `[cluster]`.
    pub(crate) config: ClusterConfig,
    /// The lease and liveness clock.
    pub(crate) clock: Arc<dyn Clock>,
    /// This node's store.
    pub(crate) local: Arc<LocalNode>,
    /// The block transport, serving `source`.
    pub(crate) transport: Arc<dyn Transport>,
    /// The message channels (Raft and control).
    pub(crate) messenger: Arc<dyn Messenger>,
    /// The source the block transport serves (pushed copies register through the cluster).
    pub(crate) source: Arc<StoreSource>,
    /// The directory member (its network already wired).
    pub(crate) directory: Directory,
    /// The Raft network's counters.
    pub(crate) raft_counters: Arc<RaftNetCounters>,
    /// Transports to close at shutdown.
    pub(crate) closers: Vec<Arc<dyn Transport>>,
}

/// Where member `m`'s block transport is reached.
pub(crate) fn block_peer(m: &Member) -> PeerAddr {
    PeerAddr::new(m.cert_name(), m.transport)
}

/// Where member `m`'s message channels are reached.
pub(crate) fn message_peer(config: &ClusterConfig, m: &Member) -> PeerAddr {
    let addr = match config.transport.kind {
        BlockTransport::Quic => m.transport,
        BlockTransport::Ucx => m.raft,
    };
    PeerAddr::new(m.cert_name(), addr)
}

impl Cluster {
    /// Starts the networks and the directory member of node `me`, serving `local`'s store;
    /// leases are timed by `clock`.
    pub(crate) async fn start(
        me: NodeId,
        config: ClusterConfig,
        data_dir: &Path,
        local: Arc<LocalNode>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Cluster>, ClusterError> {
        if config.generate_dev_certs {
            let members = config.members.len() as u32;
            match dev_certs::ensure(&config.certs_dir, members) {
                Ok(true) => tracing::warn!(
                    dir = %config.certs_dir.display(),
                    "generated development certificates (generate_dev_certs = true): not for production"
                ),
                Ok(false) => {}
                Err(reason) => {
                    return Err(ClusterError::DevCerts {
                        dir: config.certs_dir.display().to_string(),
                        reason,
                    })
                }
            }
        }
        let identity = NodeIdentity::load_from_dir(&config.certs_dir, &config.cert_name).map_err(
            |source| ClusterError::Identity {
                name: config.cert_name.clone(),
                dir: config.certs_dir.display().to_string(),
                source: Box::new(source),
            },
        )?;
        let source = Arc::new(StoreSource::new(local.clone()));
        let dcfg = config.directory.clone();
        let channels = vec![raft_channel(&dcfg), CONTROL_CHANNEL];
        let quic_listen = match config.transport.kind {
            BlockTransport::Quic => config.transport_listen,
            BlockTransport::Ucx => config.raft_listen,
        };
        let quic = QuicTransport::bind_with_channels(
            config.transport.config.clone(),
            &identity,
            quic_listen,
            source.clone(),
            channels,
        )
        .await
        .map_err(|source| ClusterError::Transport {
            addr: quic_listen,
            source: Box::new(source),
        })?;
        let quic = Arc::new(quic);
        let transport: Arc<dyn Transport> = match config.transport.kind {
            BlockTransport::Quic => quic.clone(),
            BlockTransport::Ucx => ucx_transport(&config, source.clone()).await?,
        };
        let mut closers: Vec<Arc<dyn Transport>> = vec![quic.clone()];
        if config.transport.kind == BlockTransport::Ucx {
            closers.push(transport.clone());
        }
        let messenger: Arc<dyn Messenger> = quic;
        let peers = config
            .members
            .iter()
            .map(|m| (m.id, message_peer(&config, m)))
            .collect();
        let raft = Arc::new(RaftNet::new(messenger.clone(), peers, &dcfg));
        let directory = Directory::open(
            me,
            ShardId(0),
            &data_dir.join("raft"),
            dcfg,
            raft.clone(),
            clock.clone(),
        )
        .await
        .map_err(|source| ClusterError::Directory {
            what: "opening data_dir/raft",
            source,
        })?;
        messenger
            .serve(
                raft_channel(directory.config()),
                raft.server(directory.rpc_server()),
            )
            .map_err(|source| ClusterError::Channel {
                what: "raft",
                source: Box::new(source),
            })?;
        let lowest = config.members.first().map(|m| m.id);
        // Only a member with an empty log initializes (openraft refuses, loudly, otherwise).
        let fresh = directory.metrics().last_log_index.is_none();
        if lowest == Some(me) && fresh {
            let voters: BTreeMap<_, _> = config
                .members
                .iter()
                .map(|m| (m.id, message_peer(&config, m).addr.to_string()))
                .collect();
            directory
                .initialize(voters)
                .await
                .map_err(|source| ClusterError::Directory {
                    what: "initializing the group",
                    source,
                })?;
        }
        tracing::info!(node = %me, transport = %transport.local_peer(), "cluster networks up");
        Cluster::assemble(ClusterParts {
            me,
            config,
            clock,
            local,
            transport,
            messenger,
            source,
            directory,
            raft_counters: raft.counters(),
            closers,
        })
    }

    /// The cluster side from networks and a directory member built by the caller; serves
    /// the control channel and makes pushed copies register through it.
    pub(crate) fn assemble(p: ClusterParts) -> Result<Arc<Cluster>, ClusterError> {
        #[cfg(feature = "planted-bugs")]
        if kvfabric_transport::planted::active("stale-read") {
            // Planted bug (chaos harness): a deposed leader answers linearizable reads.
            p.directory.plant_stale_read_bug();
        }
        #[cfg(feature = "planted-bugs")]
        if kvfabric_transport::planted::active("diverging-replica") {
            // Planted bug (chaos harness): this member's directory replica drifts from the
            // others' (a reply of a phantom client recorded after each entry).
            p.directory.plant_diverging_replica();
        }
        let f = p.config.failover;
        let cluster = Arc::new(Cluster {
            me: p.me,
            health: health::PeerHealth::new(p.clock.clone(), f.probe_ms, f.probe_ms_max),
            bandwidth: crate::cluster::bandwidth::BandwidthTable::new(p.me),
            config: p.config,
            clock: p.clock,
            local: p.local.clone(),
            directory: p.directory,
            transport: p.transport,
            messenger: p.messenger.clone(),
            raft_counters: p.raft_counters,
            closers: p.closers,
            incarnation: Arc::new(Incarnation::default()),
            repair: repair::RepairCounters::default(),
            tier_sync: tier_sync::TierSyncCounters::default(),
            learned: members::Learned::default(),
            drainer: drain::Drainer::default(),
            offers: offers::Offers::default(),
            reconfig: tokio::sync::Mutex::new(()),
            tasks: std::sync::Mutex::new(Vec::new()),
        });
        p.source.attach(Arc::downgrade(&cluster));
        let handler = control_server::ControlServer::new(Arc::downgrade(&cluster), p.local);
        p.messenger
            .serve(CONTROL_CHANNEL, Arc::new(handler))
            .map_err(|source| ClusterError::Channel {
                what: "control",
                source: Box::new(source),
            })?;
        Ok(cluster)
    }

    /// `work`, an exchange with member `id` at `peer`, bounded by `failover.attempt_ms`
    /// (past it, a typed timeout); silent for `failover.suspect_ms`, the member is suspected
    /// while the attempt goes on, and the transport sets aside the connection it was made
    /// on (unless it answered something else since), so the next exchange, the suspect's
    /// probe included, reaches a peer that is back at once instead of behind that
    /// connection's retransmission backoff. The outcome is recorded in peer health.
    pub(crate) async fn attempt<T>(
        &self,
        id: NodeId,
        peer: &PeerAddr,
        work: impl std::future::Future<Output = Result<T, TransportError>>,
    ) -> Result<T, TransportError> {
        let f = self.config.failover;
        let began = std::time::Instant::now();
        let work = tokio::time::timeout(std::time::Duration::from_millis(f.attempt_ms), work);
        tokio::pin!(work);
        let silence = tokio::time::sleep(std::time::Duration::from_millis(f.suspect_ms));
        let outcome = tokio::select! {
            r = &mut work => r,
            () = silence => {
                self.health.silent(id, peer);
                self.transport.set_aside(peer, began);
                (&mut work).await
            }
        };
        let r = outcome.unwrap_or_else(|_| {
            Err(TransportError::Timeout {
                peer: peer.clone(),
                what: "attempt",
                after_ms: f.attempt_ms,
            })
        });
        self.health.record(id, &r);
        r
    }

    /// Where member `id` (configured, or as it described itself) has its message channels.
    pub(crate) fn message_peer(&self, id: NodeId) -> Option<PeerAddr> {
        self.member(id).map(|m| message_peer(&self.config, &m))
    }

    /// Starts, in the background: joining, re-registering and renewing; learning the
    /// addresses of members added at run time; re-replication; and recording the store's tier
    /// moves in the directory.
    pub(crate) fn run_membership(self: &Arc<Self>) {
        let mut tasks = vec![
            tokio::spawn(membership::run(self.clone())),
            tokio::spawn(members::run(self.clone())),
        ];
        match self.local.watch_changes() {
            Ok(rx) => tasks.push(tokio::spawn(tier_sync::run(self.clone(), rx))),
            Err(e) => tracing::error!(error = %e, "tier moves will not reach the directory"),
        }
        tasks.push(tokio::spawn(repair::run(self.clone())));
        let tick = std::time::Duration::from_millis((self.config.failover.probe_ms / 2).max(20));
        tasks.push(tokio::spawn(health::run(self.clone(), tick)));
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(tasks);
    }

    /// Stops the background tasks, the directory member and both networks (bounded).
    pub(crate) async fn shutdown(&self) {
        let tasks: Vec<_> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            t.abort();
        }
        self.drainer.stop();
        if let Some(b) = self.incarnation.take_batcher() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), b.close()).await;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.directory.shutdown())
            .await;
        for t in &self.closers {
            t.close().await;
        }
    }
}

/// The UCX block transport of `config` (built with the `ucx` feature).
#[cfg(feature = "ucx")]
async fn ucx_transport(
    config: &ClusterConfig,
    source: Arc<StoreSource>,
) -> Result<Arc<dyn Transport>, ClusterError> {
    let t = kvfabric_transport::UcxTransport::bind(
        config.transport.config.clone(),
        config.cert_name.clone(),
        config.transport_listen,
        source,
    )
    .await
    .map_err(|source| ClusterError::Transport {
        addr: config.transport_listen,
        source: Box::new(source),
    })?;
    Ok(Arc::new(t))
}

/// Without the `ucx` feature, a UCX config names what is missing.
#[cfg(not(feature = "ucx"))]
async fn ucx_transport(
    _config: &ClusterConfig,
    _source: Arc<StoreSource>,
) -> Result<Arc<dyn Transport>, ClusterError> {
    Err(ClusterError::NotBuilt {
        kind: "ucx",
        reason: "this kvfabric was built without the `ucx` feature (build with --features ucx; needs libucx-dev)",
    })
}
