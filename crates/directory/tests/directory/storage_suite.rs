//! openraft's own storage conformance suite, run against the redb store.

use std::sync::Arc;

use kvfabric_directory::storage::{open_store, LogStore, SnapshotTrigger, StateMachineStore};
use kvfabric_directory::{NodeId, ShardId, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageError, StorageIOError};

struct RedbBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for RedbBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir =
            tempfile::tempdir().map_err(|e| StorageIOError::<NodeId>::write(AnyError::new(&e)))?;
        let (log, sm) = open_store(
            &dir.path().join("suite.redb"),
            ShardId(0),
            Arc::new(SnapshotTrigger::new(100_000)),
        )
        .await
        .map_err(|e| StorageIOError::<NodeId>::write(AnyError::new(&e)))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn redb_store_passes_openraft_storage_suite() -> anyhow::Result<()> {
    Suite::test_all(RedbBuilder).map_err(|e| anyhow::anyhow!("openraft storage suite: {e}"))
}
