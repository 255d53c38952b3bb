//! The planted bug — a deposed leader answering a "linearizable" read from its own state —
//! produces a history the linearizability checker rejects; the correct read path refuses to
//! answer instead. A unit test so that the bug path exists only in test builds (`cfg(test)`).

use std::time::Duration;

use kvfabric_store::{BlockId, Tier};

use crate::command::OwnershipBatch;
use crate::config::DirectoryConfig;
use crate::ids::{ChunkKey, NodeId};
use crate::linearizability::{check_registers, Call, CheckLimits, HistoryRecorder, Ret, Verdict};
use crate::read::ReadConsistency;
use crate::testing::TestCluster;

const LIMIT: Duration = Duration::from_secs(30);

fn block(v: u64) -> BlockId {
    let mut b = [0xb1u8; 32];
    b[..8].copy_from_slice(&v.to_le_bytes());
    BlockId(b)
}

fn value_of(b: &BlockId) -> u64 {
    u64::from_le_bytes(b.0[..8].try_into().expect("8 bytes"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checker_catches_a_deposed_leader_answering_linearizable_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let config = DirectoryConfig {
        read_timeout_ms: 2_000,
        write_timeout_ms: 10_000,
        ..TestCluster::test_config()
    };
    let c = TestCluster::start(tmp.path(), &[1, 2, 3], config)
        .await
        .unwrap();
    let all = [NodeId(1), NodeId(2), NodeId(3)];
    let key = ChunkKey([7; 32]);
    let history = HistoryRecorder::new();

    tracing::info!("--- phase 1: write v1 through the leader");
    let old = c.wait_for_leader(&all, LIMIT).await.unwrap();
    let epoch = c.member(old).join(NodeId(9)).await.unwrap();
    let write = |v: u64| {
        OwnershipBatch::claim(
            NodeId(9),
            epoch,
            vec![(block(v), Tier::Host)],
            vec![(key, block(v))],
        )
    };
    let h = history.invoke(0, 0, Call::Write(1));
    c.member(old).update_ownership(write(1)).await.unwrap();
    history.complete(h, Ret::Written);

    tracing::info!(%old, "--- phase 2: isolate the leader; the others elect a new one and write v2");
    c.router().isolate(old);
    let others: Vec<NodeId> = all.iter().copied().filter(|n| *n != old).collect();
    let new = c.wait_for_leader(&others, LIMIT).await.unwrap();
    assert_ne!(new, old);
    let h = history.invoke(1, 0, Call::Write(2));
    c.member(new).update_ownership(write(2)).await.unwrap();
    history.complete(h, Ret::Written);

    tracing::info!("--- phase 3: the correct read path on the deposed leader refuses to answer");
    assert_eq!(
        c.member(old).current_leader(),
        Some(old),
        "the old leader must still believe it leads"
    );
    let h = history.invoke(2, 0, Call::Read);
    let honest = c
        .member(old)
        .resolve(&key, ReadConsistency::Linearizable)
        .await;
    assert!(
        honest.is_err(),
        "a cut-off leader answered a linearizable read: {honest:?}"
    );
    history.discard(h);
    let clean = check_registers(&history.history(), None, CheckLimits::default());
    assert!(matches!(clean, Verdict::Linearizable { .. }), "{clean:?}");

    tracing::info!("--- phase 4: with the bug planted, it answers from its stale state");
    c.member(old).plant_stale_read_bug();
    assert_eq!(c.member(old).current_leader(), Some(old));
    let h = history.invoke(2, 0, Call::Read);
    let stale = c
        .member(old)
        .resolve(&key, ReadConsistency::Linearizable)
        .await
        .unwrap();
    history.complete(h, Ret::Read(stale.as_ref().map(value_of)));
    assert_eq!(
        stale.as_ref().map(value_of),
        Some(1),
        "the planted bug did not bite"
    );

    tracing::info!("--- phase 5: the checker flags the history");
    let verdict = check_registers(&history.history(), None, CheckLimits::default());
    assert!(
        matches!(verdict, Verdict::NotLinearizable { key: 0, .. }),
        "the checker missed the stale read: {verdict:?}"
    );
    c.router().heal();
    c.shutdown().await.unwrap();
}
