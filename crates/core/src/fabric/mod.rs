//! [`Fabric`]: the node's use-cases as methods of one type — [`Fabric::put`], [`Fabric::get`],
//! [`Fabric::head`], [`Fabric::delete`], [`Fabric::lookup`], [`Fabric::route`], the
//! per-request arenas of hybrid models ([`Fabric::arena_create`] and the rest of [`arena`]),
//! the live membership changes ([`Fabric::add_member`], [`Fabric::remove_member`]), the
//! operator's ownership records without a payload ([`Fabric::claim_records`]) — and the
//! views the API shows (the cluster, readiness, counters).
//!
//! A fabric is built from this node's open store ([`LocalNode`]), its model catalog, an
//! injected clock and, on a cluster member, its cluster side ([`Cluster`]: the directory
//! member, the block transport and the control channel). It never knows about HTTP: callers
//! hand it typed requests and map its [`FabricError`]s onto their own answers.

pub mod arena;
mod claims;
mod lookup;
mod members;
mod put;
mod read;
mod route;
mod variant;
mod view;

use std::path::Path;
use std::sync::{Arc, Mutex};

use kvfabric_directory::Clock;
use kvfabric_store::arena::ArenaLimits;

pub use arena::{ArenaHandle, ArenaLayer, ArenaRows, ArenaStatus, TokenAppended};
pub use lookup::Resolved;
pub use put::{PutBody, PutDone, PutFailure, PutRequest};
pub use read::{Head, Served};
pub use route::{RouteAnswer, RouteQuery};
pub use view::{opening, tier_infos, ClusterInfo, MemberInfo, StateDigest, TierInfo};

use crate::cluster::{Cluster, ClusterError};
use crate::config::{ClusterConfig, RouteConfig};
use crate::events::cluster::ClusterFeed;
use crate::events::EventLog;
use crate::ids::NodeId;
use crate::local::LocalNode;
use crate::presets::Catalog;
use arena::ArenaTable;

/// What a fabric is built from.
pub struct FabricParts {
    /// This node.
    pub me: NodeId,
    /// Its HTTP API as clients reach it (what its views name it by).
    pub api: String,
    /// The presets it accepts.
    pub catalog: Arc<Catalog>,
    /// The cost model of routes.
    pub route: RouteConfig,
    /// The clock leases and liveness are judged by.
    pub clock: Arc<dyn Clock>,
    /// The open store.
    pub local: Arc<LocalNode>,
    /// The node's event log (a cluster member adds `node_down` events to it).
    pub events: Arc<EventLog>,
    /// The cluster feed, when this node runs one (`events.cluster_feed`): a cluster member
    /// polls every other member's log into it.
    pub feed: Option<Arc<ClusterFeed>>,
    /// Bounds of the per-request arenas.
    pub arenas: ArenaLimits,
}

/// The fabric core of one node.
pub struct Fabric {
    me: NodeId,
    api: String,
    catalog: Arc<Catalog>,
    route: RouteConfig,
    local: Arc<LocalNode>,
    cluster: Option<Arc<Cluster>>,
    arenas: Mutex<ArenaTable>,
}

impl Fabric {
    /// A standalone node's fabric: its store alone.
    pub fn standalone(parts: FabricParts) -> Fabric {
        Fabric {
            me: parts.me,
            api: parts.api,
            catalog: parts.catalog,
            route: parts.route,
            local: parts.local,
            cluster: None,
            arenas: Mutex::new(ArenaTable::new(parts.arenas)),
        }
    }

    /// A cluster member's fabric: starts its networks and directory member (on
    /// `data_dir/raft`), then, in the background, joins, re-registers what the store holds,
    /// renews its lease, re-replicates and follows tier moves.
    pub async fn start_member(
        parts: FabricParts,
        config: ClusterConfig,
        data_dir: &Path,
    ) -> Result<Fabric, ClusterError> {
        let cluster = Cluster::start(
            parts.me,
            config,
            data_dir,
            parts.local.clone(),
            parts.clock.clone(),
        )
        .await?;
        cluster.run_membership();
        crate::events::node_down::spawn(cluster.clone(), parts.events.clone());
        if let Some(feed) = &parts.feed {
            crate::events::poll::spawn(cluster.clone(), feed.clone(), parts.events.closed());
        }
        Ok(Fabric {
            me: parts.me,
            api: parts.api,
            catalog: parts.catalog,
            route: parts.route,
            local: parts.local,
            cluster: Some(cluster),
            arenas: Mutex::new(ArenaTable::new(parts.arenas)),
        })
    }

    /// A member's fabric over a cluster side assembled by the caller (deterministic tests).
    pub(crate) fn over(parts: FabricParts, cluster: Arc<Cluster>) -> Fabric {
        cluster.run_membership();
        crate::events::node_down::spawn(cluster.clone(), parts.events.clone());
        if let Some(feed) = &parts.feed {
            crate::events::poll::spawn(cluster.clone(), feed.clone(), parts.events.closed());
        }
        Fabric {
            me: parts.me,
            api: parts.api,
            catalog: parts.catalog,
            route: parts.route,
            local: parts.local,
            cluster: Some(cluster),
            arenas: Mutex::new(ArenaTable::new(parts.arenas)),
        }
    }

    /// This node.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The presets it accepts.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The cluster side, on a member.
    pub(crate) fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// The leader this member knows of (standalone: none).
    pub fn leader(&self) -> Option<NodeId> {
        self.cluster.as_ref()?.directory.current_leader()
    }

    /// The members this node suspects dead now (standalone: none).
    pub fn suspects(&self) -> Vec<NodeId> {
        self.cluster
            .as_ref()
            .map(|c| c.health.suspects())
            .unwrap_or_default()
    }

    /// Whether it is a cluster member.
    pub fn clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// Stops the cluster side (background tasks, directory member, networks), bounded.
    pub async fn shutdown(&self) {
        if let Some(c) = &self.cluster {
            c.shutdown().await;
        }
    }
}
