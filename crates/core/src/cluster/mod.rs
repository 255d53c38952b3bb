//! The node as a cluster member: its Raft network ([`raft_net`]), its directory member and
//! incarnation ([`membership`]), the block transport serving its store ([`source`]), and
//! the views `/v1/cluster`, `/readyz` and `/metrics` read ([`view`]).
//!
//! Who the members are is the Raft membership's business ([`members`]); it changes at run
//! time one step at a time ([`reconfig`]: a new member joins as a learner, catches up and is
//! promoted; a leaving one is demoted, drains ([`drain`]) and leaves).
//!
//! Start order (see [`Cluster::start`]): load the TLS identity; bind the block transport and
//! the Raft endpoint; open the directory on `data_dir/raft`; the lowest-id member initializes
//! the group with every configured member as a voter (skipped once it has a log); then, in the
//! background, the node joins (a new epoch per start), re-registers the blocks it recovered
//! from disk under that epoch, and renews its lease every `lease_renew_ms`.
//!
//! The data path across nodes: a put waits for `replication` verified copies
//! ([`replication`], over the control channel of [`control`]); a get that misses locally
//! fetches from the block's live owners ([`remote_get`]), and every such fetch is timed into
//! the bandwidth table that `POST /v1/route` prices with ([`links`]); blocks whose live
//! copies fell below the replication factor get new ones ([`repair`]); the store's tier moves
//! keep owner records' tiers current ([`tier_sync`]).

pub mod bandwidth;
pub mod control;
mod control_server;
mod dev_certs;
mod dir_keys;
pub(crate) mod drain;
mod links;
pub mod members;
pub(crate) mod membership;
mod peer_tls;
pub mod raft_net;
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
use kvfabric_transport::{NodeIdentity, QuicTransport, Transport, TransportConfig, TransportError};
use tokio::task::JoinHandle;

use crate::config::ClusterConfig;
use crate::ids::NodeId;
use crate::local::LocalNode;
use membership::Incarnation;
use raft_net::{QuicRaftNet, RaftNetError};

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
        source: TransportError,
    },
    /// The block transport could not start.
    #[error("starting the block transport on {addr}: {source}")]
    Transport {
        /// The listen address.
        addr: std::net::SocketAddr,
        /// Why.
        source: TransportError,
    },
    /// The Raft endpoint could not start.
    #[error(transparent)]
    RaftNet(#[from] RaftNetError),
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
    /// The block transport (serves this node's store, fetches from peers).
    pub(crate) transport: Arc<dyn Transport>,
    /// The Raft network.
    pub(crate) raft_net: Arc<QuicRaftNet>,
    /// The current incarnation, once joined.
    pub(crate) incarnation: Arc<Incarnation>,
    /// What re-replication has done.
    pub(crate) repair: repair::RepairCounters,
    /// Tier moves recorded in the directory.
    pub(crate) tier_sync: tier_sync::TierSyncCounters,
    /// Measured node-to-node bandwidths (this node's and its peers' reports).
    pub(crate) bandwidth: crate::cluster::bandwidth::BandwidthTable,
    /// Addresses of members not in the config, as they described themselves.
    pub(crate) learned: members::Learned,
    /// This member's drain, when it is leaving.
    pub(crate) drainer: drain::Drainer,
    /// One membership change at a time through this member.
    pub(crate) reconfig: tokio::sync::Mutex<()>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
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
                source,
            },
        )?;
        let source = Arc::new(source::StoreSource::new(local.clone()));
        let transport: Arc<dyn Transport> = Arc::new(
            QuicTransport::bind(
                TransportConfig::default(),
                &identity,
                config.transport_listen,
                source,
            )
            .await
            .map_err(|source| ClusterError::Transport {
                addr: config.transport_listen,
                source,
            })?,
        );
        let dcfg = config.directory.clone();
        let raft_net = QuicRaftNet::bind(
            &identity,
            config.raft_listen,
            dcfg.frame_bytes_max as usize,
            std::time::Duration::from_millis(dcfg.rpc_timeout_ms),
        )?;
        let handlers = Arc::new(raft_net::Handlers::default());
        raft_net.serve(handlers.clone());
        let directory = Directory::open(
            kvfabric_directory::NodeId(me.0),
            ShardId(0),
            &data_dir.join("raft"),
            dcfg,
            raft_net.clone(),
            clock.clone(),
        )
        .await
        .map_err(|source| ClusterError::Directory {
            what: "opening data_dir/raft",
            source,
        })?;
        #[cfg(feature = "planted-bugs")]
        if kvfabric_transport::planted::active("stale-read") {
            // Planted bug (chaos harness): a deposed leader answers linearizable reads.
            directory.plant_stale_read_bug();
        }
        let _ = handlers.raft.set(directory.rpc_server());
        let lowest = config.members.first().map(|m| m.id);
        // Only a member with an empty log initializes (openraft refuses, loudly, otherwise).
        let fresh = directory.metrics().last_log_index.is_none();
        if lowest == Some(me) && fresh {
            let voters: BTreeMap<_, _> = config
                .members
                .iter()
                .map(|m| (kvfabric_directory::NodeId(m.id.0), m.raft.to_string()))
                .collect();
            directory
                .initialize(voters)
                .await
                .map_err(|source| ClusterError::Directory {
                    what: "initializing the group",
                    source,
                })?;
        }
        tracing::info!(node = %me, transport = %transport.local_peer(), raft = ?raft_net.local_addr(), "cluster networks up");
        let cluster = Arc::new(Cluster {
            me,
            config,
            clock,
            local: local.clone(),
            directory,
            transport,
            raft_net,
            incarnation: Arc::new(Incarnation::default()),
            repair: repair::RepairCounters::default(),
            tier_sync: tier_sync::TierSyncCounters::default(),
            bandwidth: crate::cluster::bandwidth::BandwidthTable::new(me),
            learned: members::Learned::default(),
            drainer: drain::Drainer::default(),
            reconfig: tokio::sync::Mutex::new(()),
            tasks: std::sync::Mutex::new(Vec::new()),
        });
        let handler = control_server::ControlServer::new(Arc::downgrade(&cluster), local);
        let _ = handlers.control.set(Arc::new(handler));
        Ok(cluster)
    }

    /// Starts, in the background: joining, re-registering and renewing; learning the
    /// addresses of members added at run time; re-replication; and recording the store's tier
    /// moves in the directory.
    pub(crate) fn run_membership(self: &Arc<Self>) {
        let mut tasks = vec![
            tokio::spawn(membership::run(self.clone())),
            tokio::spawn(members::run(self.clone())),
        ];
        match self.local.watch_moves() {
            Ok(rx) => tasks.push(tokio::spawn(tier_sync::run(self.clone(), rx))),
            Err(e) => tracing::error!(error = %e, "tier moves will not reach the directory"),
        }
        tasks.push(tokio::spawn(repair::run(self.clone())));
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
        self.transport.close().await;
        self.raft_net.close();
    }
}
