//! openraft's own storage conformance suite, run against the member's store (WAL + redb).

use std::sync::Arc;

use kvfabric_directory::storage::{open_store, LogStore, SnapshotTrigger, StateMachineStore};
use kvfabric_directory::{NodeId, ShardId, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageError, StorageIOError};

struct MemberStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir>
    for MemberStoreBuilder
{
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
fn member_store_passes_openraft_storage_suite() -> anyhow::Result<()> {
    Suite::test_all(MemberStoreBuilder).map_err(|e| anyhow::anyhow!("openraft storage suite: {e}"))
}
