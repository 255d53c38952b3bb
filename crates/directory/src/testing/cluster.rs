//! [`TestCluster`]: start, stop, restart and partition members of one shard in one process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ServerState;

use crate::clock::ManualClock;
use crate::config::DirectoryConfig;
use crate::directory::Directory;
use crate::error::DirectoryError;
use crate::ids::{NodeId, ShardId};
use crate::network::InMemoryRouter;

/// How long a restarted member waits for the previous instance to release its store file.
const REOPEN_WAIT_MAX: Duration = Duration::from_secs(15);

/// A cluster of directory members in this process.
pub struct TestCluster {
    base: PathBuf,
    config: DirectoryConfig,
    router: Arc<InMemoryRouter>,
    clock: Arc<ManualClock>,
    members: BTreeMap<NodeId, Directory>,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("base", &self.base)
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

impl TestCluster {
    /// A config for loaded test machines: elections slow enough not to fire spuriously under
    /// load, small batches, long leases (tests move the manual clock explicitly).
    pub fn test_config() -> DirectoryConfig {
        DirectoryConfig {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 600,
            election_timeout_max_ms: 1_200,
            lease_ms: 60_000,
            lease_check_interval_ms: 100,
            rpc_timeout_ms: 1_000,
            write_timeout_ms: 20_000,
            read_timeout_ms: 5_000,
            forward_attempts_max: 50,
            ..DirectoryConfig::default()
        }
    }

    /// The address a member registers under (the router ignores it; a real transport would
    /// dial it).
    pub fn addr(id: NodeId) -> String {
        format!("mem://{}", id.0)
    }

    /// Starts members `ids` with stores under `base` and forms a cluster with all of them as
    /// voters.
    pub async fn start(
        base: &Path,
        ids: &[u64],
        config: DirectoryConfig,
    ) -> Result<TestCluster, DirectoryError> {
        let mut c = TestCluster {
            base: base.to_path_buf(),
            config,
            router: Arc::new(InMemoryRouter::new(0x5eed)),
            clock: Arc::new(ManualClock::new(1_000_000)),
            members: BTreeMap::new(),
        };
        for id in ids {
            c.start_member(NodeId(*id)).await?;
        }
        let members = ids
            .iter()
            .map(|i| (NodeId(*i), Self::addr(NodeId(*i))))
            .collect();
        c.member(NodeId(ids[0])).initialize(members).await?;
        Ok(c)
    }

    /// The store file of a member.
    pub fn store_path(&self, id: NodeId) -> PathBuf {
        self.base.join(format!("member-{}.redb", id.0))
    }

    /// Starts (or restarts) member `id` on its store; it resumes from whatever the store holds.
    pub async fn start_member(&mut self, id: NodeId) -> Result<(), DirectoryError> {
        assert!(!self.members.contains_key(&id), "{id} is already running");
        let started = Instant::now();
        let dir = loop {
            let opened = Directory::open(
                id,
                ShardId(0),
                &self.store_path(id),
                self.config.clone(),
                self.router.clone(),
                self.clock.clone(),
            )
            .await;
            match opened {
                Ok(d) => break d,
                // The previous instance's tasks may still hold the file for a moment.
                Err(DirectoryError::Storage { .. }) if started.elapsed() < REOPEN_WAIT_MAX => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        };
        self.router.register(id, dir.rpc_server());
        self.members.insert(id, dir);
        Ok(())
    }

    /// Stops member `id` as a crash would (its store stays as it is on disk).
    pub async fn stop_member(&mut self, id: NodeId) -> Result<(), DirectoryError> {
        let dir = self
            .members
            .remove(&id)
            .unwrap_or_else(|| panic!("{id} is not running"));
        self.router.unregister(id);
        dir.shutdown().await
    }

    /// Stops then starts member `id`.
    pub async fn restart_member(&mut self, id: NodeId) -> Result<(), DirectoryError> {
        self.stop_member(id).await?;
        self.start_member(id).await
    }

    /// A running member.
    ///
    /// # Panics
    /// When `id` is not running.
    pub fn member(&self, id: NodeId) -> Directory {
        self.members
            .get(&id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} is not running"))
    }

    /// Ids of the running members.
    pub fn running(&self) -> Vec<NodeId> {
        self.members.keys().copied().collect()
    }

    /// The network, for faults.
    pub fn router(&self) -> &InMemoryRouter {
        &self.router
    }

    /// The lease clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Waits for a leader among `among` (running members): one that is leader by its own
    /// metrics in the highest term any of them has seen.
    pub async fn wait_for_leader(
        &self,
        among: &[NodeId],
        limit: Duration,
    ) -> Result<NodeId, DirectoryError> {
        let started = Instant::now();
        loop {
            let metrics: Vec<_> = among
                .iter()
                .filter_map(|id| self.members.get(id))
                .map(|d| d.metrics())
                .collect();
            let top = metrics.iter().map(|m| m.current_term).max().unwrap_or(0);
            if let Some(m) = metrics
                .iter()
                .find(|m| m.state == ServerState::Leader && m.current_term == top)
            {
                return Ok(m.id);
            }
            if started.elapsed() > limit {
                return Err(DirectoryError::Timeout {
                    op: "leader election",
                    limit_ms: limit.as_millis() as u64,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every member in `ids` has applied at least `index`.
    pub async fn wait_applied(
        &self,
        ids: &[NodeId],
        index: u64,
        limit: Duration,
    ) -> Result<(), DirectoryError> {
        for id in ids {
            self.member(*id)
                .raft()
                .wait(Some(limit))
                .applied_index_at_least(Some(index), "test wait")
                .await
                .map_err(|_| DirectoryError::Timeout {
                    op: "apply",
                    limit_ms: limit.as_millis() as u64,
                })?;
        }
        Ok(())
    }

    /// Stops every member.
    pub async fn shutdown(mut self) -> Result<(), DirectoryError> {
        for id in self.running() {
            self.stop_member(id).await?;
        }
        Ok(())
    }
}
