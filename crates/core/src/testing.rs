//! [`FabricCluster`]: several fabrics in one process — the deterministic multi-node harness.
//! Blocks and control travel over the in-memory transport ([`MemoryNetwork`], with its fault
//! hooks), Raft over the directory's in-memory router ([`InMemoryRouter`]), leases by a
//! [`ManualClock`] that moves only when a test says (so a "dead" member's lease stays current
//! until the test expires it, exactly as in the minutes after a real crash). Each node has
//! its own store in a directory of the test's.
//!
//! Tests written on it announce their phases (`tracing::info!`) and assert behaviour —
//! outcomes, verdicts, counters — never timing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvfabric_directory::{
    Directory, DirectoryConfig, InMemoryRouter, ManualClock, NodeId as DirNodeId, ShardId,
};
use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{ByteCount, NamespaceKey, StoreConfig};
use kvfabric_transport::{MemoryNetwork, MemoryTransport, Messenger, Transport, TransportConfig};

use crate::cluster::net::{raft_channel, RaftNetCounters, CONTROL_CHANNEL};
use crate::cluster::source::StoreSource;
use crate::cluster::{Cluster, ClusterParts};
use crate::config::{ClusterConfig, FailoverConfig, Member, RouteConfig, TransportSettings};
use crate::events::{EventLog, EventMetrics};
use crate::fabric::{Fabric, FabricParts};
use crate::ids::NodeId;
use crate::local::LocalNode;
use crate::presets::Catalog;

/// How a test cluster is set up.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Members, `1..=nodes`.
    pub nodes: u64,
    /// Copies a put waits for.
    pub replication: u32,
    /// The directory's timing (the router ignores addresses).
    pub directory: DirectoryConfig,
    /// Attempt, hedge and probe bounds.
    pub failover: FailoverConfig,
    /// The transport's bounds.
    pub transport: TransportConfig,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            nodes: 3,
            replication: 2,
            directory: kvfabric_directory::testing::TestCluster::test_config(),
            failover: FailoverConfig::default(),
            transport: TransportConfig {
                connect_timeout_ms: 1_000,
                fetch_timeout_ms: 5_000,
                ..TransportConfig::default()
            },
        }
    }
}

/// One member of a [`FabricCluster`].
pub struct TestMember {
    /// Its fabric.
    pub fabric: Arc<Fabric>,
    /// Its block and control transport.
    pub transport: MemoryTransport,
}

/// Several fabrics in one process.
pub struct FabricCluster {
    base: PathBuf,
    setup: Setup,
    catalog: Arc<Catalog>,
    net: Arc<MemoryNetwork>,
    router: Arc<InMemoryRouter>,
    clock: Arc<ManualClock>,
    members: BTreeMap<NodeId, TestMember>,
}

/// The bound on everything a test waits for (elections, joins) on a loaded machine.
pub const SETTLE: Duration = Duration::from_secs(60);

/// The namespace test puts go to (an open node's).
pub fn namespace() -> NamespaceKey {
    NamespaceKey::derive(crate::OPEN_NAMESPACE)
}

/// Member `id`'s block transport address on the memory network.
fn block_addr(id: u64) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, id as u8], 7200))
}

/// Member `id`'s certificate name (what a peer dials it as).
pub fn name(id: NodeId) -> String {
    format!("node{}", id.0)
}

impl FabricCluster {
    /// Starts `setup.nodes` members with stores under `base`, serving `catalog`, and waits
    /// until every one is ready (joined, leader known, its join applied).
    pub async fn start(base: &Path, setup: Setup, catalog: Catalog) -> FabricCluster {
        let mut c = FabricCluster {
            base: base.to_path_buf(),
            catalog: Arc::new(catalog),
            net: MemoryNetwork::new(0x5eed),
            router: Arc::new(InMemoryRouter::new(0x5eed)),
            clock: Arc::new(ManualClock::new(1_000_000)),
            members: BTreeMap::new(),
            setup,
        };
        for id in 1..=c.setup.nodes {
            c.start_member(NodeId(id)).await;
        }
        let voters = (1..=c.setup.nodes)
            .map(|i| (DirNodeId(i), format!("mem://{i}")))
            .collect();
        let first = c.fabric(NodeId(1));
        first
            .cluster()
            .expect("a member")
            .directory
            .initialize(voters)
            .await
            .expect("initialize");
        c.wait_ready(&c.ids()).await;
        c
    }

    fn config(&self, me: NodeId) -> ClusterConfig {
        let members = (1..=self.setup.nodes)
            .map(|i| Member {
                id: NodeId(i),
                api: format!("http://10.0.0.{i}:7100"),
                transport: block_addr(i),
                raft: SocketAddr::from(([10, 0, 0, i as u8], 7300)),
            })
            .collect();
        ClusterConfig {
            transport_listen: block_addr(me.0),
            raft_listen: SocketAddr::from(([10, 0, 0, me.0 as u8], 7300)),
            certs_dir: PathBuf::new(),
            generate_dev_certs: false,
            cert_name: name(me),
            replication: self.setup.replication,
            lease_renew: Duration::from_millis(self.setup.directory.lease_ms / 4),
            repair_interval: None,
            repair_blocks_max: 256,
            members,
            directory: self.setup.directory.clone(),
            transport: TransportSettings {
                kind: crate::config::BlockTransport::Quic,
                config: self.setup.transport.clone(),
            },
            failover: self.setup.failover,
        }
    }

    /// Starts member `id` on its store (it rejoins with a new epoch).
    pub async fn start_member(&mut self, id: NodeId) {
        let dir = self.base.join(format!("n{}", id.0));
        let store = StoreConfig {
            disk: Some(DiskConfig::new(dir.join("disk"), ByteCount(64 << 20))),
            ..StoreConfig::host_only(ByteCount(32 << 20))
        };
        let (local, _) = LocalNode::open(store, &[namespace()]).expect("store");
        let events = Arc::new(EventLog::new(id, 1, 1024, EventMetrics::default()));
        local.attach_events(events.clone()).expect("events");
        let local = Arc::new(local);
        let source = Arc::new(StoreSource::new(local.clone()));
        let config = self.config(id);
        self.net.revive(&name(id));
        let transport = self
            .net
            .join_at(
                &name(id),
                block_addr(id.0),
                config.transport.config.clone(),
                source.clone(),
                vec![raft_channel(&config.directory), CONTROL_CHANNEL],
            )
            .expect("join the network");
        let directory = open_directory(&dir, id, &config, &self.router, &self.clock).await;
        self.router.register(id, directory.rpc_server());
        let shared: Arc<dyn Transport> = Arc::new(transport.clone());
        let messenger: Arc<dyn Messenger> = Arc::new(transport.clone());
        let cluster = Cluster::assemble(ClusterParts {
            me: id,
            config,
            clock: self.clock.clone(),
            local: local.clone(),
            transport: shared.clone(),
            messenger,
            source,
            directory,
            raft_counters: Arc::new(RaftNetCounters::default()),
            closers: vec![shared],
        })
        .expect("assemble");
        let parts = FabricParts {
            me: id,
            api: format!("http://10.0.0.{}:7100", id.0),
            catalog: self.catalog.clone(),
            route: RouteConfig::default(),
            clock: self.clock.clone(),
            local,
            events,
            feed: None,
            // The deterministic tests make no arenas: the smallest table.
            arenas: kvfabric_store::arena::ArenaLimits {
                arenas_max: 1,
                bytes_max: kvfabric_store::ByteCount(0),
            },
        };
        let fabric = Arc::new(Fabric::over(parts, cluster));
        self.members.insert(id, TestMember { fabric, transport });
    }

    /// Kills member `id` as a SIGKILL would look to the others: it answers nothing on any
    /// network from now on, and its side is stopped (its store stays on disk). Its lease in
    /// the directory stays current until the test moves the clock past it.
    pub async fn kill(&mut self, id: NodeId) {
        self.net.kill(&name(id));
        self.router.unregister(id);
        if let Some(m) = self.members.remove(&id) {
            m.fabric.shutdown().await;
        }
    }

    /// Member `id`'s fabric.
    pub fn fabric(&self, id: NodeId) -> Arc<Fabric> {
        self.members
            .get(&id)
            .unwrap_or_else(|| panic!("{id} is not running"))
            .fabric
            .clone()
    }

    /// Running members.
    pub fn ids(&self) -> Vec<NodeId> {
        self.members.keys().copied().collect()
    }

    /// The block and control network, for faults.
    pub fn network(&self) -> &MemoryNetwork {
        &self.net
    }

    /// The Raft network, for faults.
    pub fn router(&self) -> &InMemoryRouter {
        &self.router
    }

    /// The lease and health clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The leader every member of `among` names, once they agree.
    pub async fn leader(&self, among: &[NodeId]) -> NodeId {
        self.wait("one leader named by every member", || {
            let named: Vec<Option<NodeId>> = among
                .iter()
                .map(|id| self.members[id].fabric.leader())
                .collect();
            let first = named.first().copied().flatten()?;
            named
                .iter()
                .all(|n| *n == Some(first))
                .then_some(first)
                .filter(|l| among.contains(l))
        })
        .await
    }

    /// Waits until every member of `ids` is ready.
    pub async fn wait_ready(&self, ids: &[NodeId]) {
        for id in ids {
            let f = self.fabric(*id);
            self.wait("a member ready", || f.ready().ok()).await;
        }
    }

    /// Polls `f` until it gives a value, for at most [`SETTLE`].
    pub async fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(started.elapsed() < SETTLE, "gave up waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every member.
    pub async fn shutdown(mut self) {
        for id in self.ids() {
            self.kill(id).await;
        }
    }
}

async fn open_directory(
    dir: &Path,
    id: NodeId,
    config: &ClusterConfig,
    router: &Arc<InMemoryRouter>,
    clock: &Arc<ManualClock>,
) -> Directory {
    let started = Instant::now();
    loop {
        let opened = Directory::open(
            id,
            ShardId(0),
            &dir.join("raft"),
            config.directory.clone(),
            router.clone(),
            clock.clone(),
        )
        .await;
        match opened {
            Ok(d) => return d,
            // A previous instance's tasks may still hold the files for a moment.
            Err(_) if started.elapsed() < SETTLE => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("opening {id}'s directory: {e}"),
        }
    }
}
