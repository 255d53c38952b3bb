//! Helpers shared by the cluster tests.

use std::time::Duration;

use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{ChunkKey, DirectoryConfig, NodeId};
use kvfabric_store::BlockId;

/// Generous bound for anything a loaded 2-core machine must finish (elections, catch-up).
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

/// Logs to the test's output, filtered by RUST_LOG (default: warnings only).
pub(crate) fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A block id that carries `v` in its first 8 bytes (so reads can be mapped back to values).
pub(crate) fn block(v: u64) -> BlockId {
    let mut b = [0xb1u8; 32];
    b[..8].copy_from_slice(&v.to_le_bytes());
    BlockId(b)
}

/// The value a [`block`] id carries.
pub(crate) fn value_of(b: &BlockId) -> u64 {
    u64::from_le_bytes(b.0[..8].try_into().expect("8 bytes"))
}

/// A chunk key derived from `k`.
pub(crate) fn chunk(k: u64) -> ChunkKey {
    let mut c = [0xc4u8; 32];
    c[..8].copy_from_slice(&k.to_le_bytes());
    ChunkKey(c)
}

/// Node ids.
pub(crate) fn ids(v: &[u64]) -> Vec<NodeId> {
    v.iter().map(|i| NodeId(*i)).collect()
}

/// Starts a cluster of `members` on a fresh temp dir.
pub(crate) async fn start(
    members: &[u64],
    config: DirectoryConfig,
) -> anyhow::Result<(tempfile::TempDir, TestCluster)> {
    let dir = tempfile::tempdir()?;
    let cluster = TestCluster::start(dir.path(), members, config).await?;
    Ok((dir, cluster))
}
