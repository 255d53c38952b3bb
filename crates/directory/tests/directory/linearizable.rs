//! A concurrent history of writes and linearizable reads from several clients, against several
//! members and through a leader isolation, passes the linearizability checker.

use std::sync::Arc;
use std::time::Duration;

use kvfabric_directory::linearizability::{
    check_registers, Call, CheckLimits, HistoryRecorder, Ret, Verdict,
};
use kvfabric_directory::testing::TestCluster;
use kvfabric_directory::{
    DirectoryConfig, DirectoryError, NodeId, OwnershipBatch, ReadConsistency,
};
use kvfabric_store::Tier;

use crate::common::{block, chunk, ids, init_tracing, start, value_of, LIMIT};

const CLIENTS: u32 = 4;
const OPS_PER_CLIENT: u64 = 30;
const KEYS: u64 = 3;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_and_linearizable_reads_are_linearizable() -> anyhow::Result<()> {
    init_tracing();
    let config = DirectoryConfig {
        write_timeout_ms: 4_000,
        read_timeout_ms: 3_000,
        ..TestCluster::test_config()
    };
    let (_dir, c) = start(&[1, 2, 3], config).await?;
    let all = ids(&[1, 2, 3]);
    let leader = c.wait_for_leader(&all, LIMIT).await?;
    let epoch = c.member(leader).join(NodeId(9)).await?;
    let members: Vec<_> = all.iter().map(|n| c.member(*n)).collect();
    let history = Arc::new(HistoryRecorder::new());

    tracing::info!("--- phase 1: clients write and read while the leader is isolated and healed");
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let members = members.clone();
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (u64::from(client) + 1);
            for op in 0..OPS_PER_CLIENT {
                // Paced so that the run spans the isolation window below.
                tokio::time::sleep(Duration::from_millis(20 + xorshift(&mut rng) % 60)).await;
                let d = &members[(xorshift(&mut rng) % members.len() as u64) as usize];
                let key = xorshift(&mut rng) % KEYS;
                if xorshift(&mut rng).is_multiple_of(2) {
                    let v = u64::from(client + 1) * 1_000 + op;
                    let h = history.invoke(client, key, Call::Write(v));
                    let batch = OwnershipBatch::claim(
                        NodeId(9),
                        epoch,
                        vec![(block(v), Tier::Host)],
                        vec![(chunk(key), block(v))],
                    );
                    match d.update_ownership(batch).await {
                        Ok(_) => history.complete(h, Ret::Written),
                        Err(DirectoryError::Rejected(r)) => panic!("write rejected: {r:?}"),
                        // Unknown outcome: it may still commit later.
                        Err(_) => history.unknown(h),
                    }
                } else {
                    let h = history.invoke(client, key, Call::Read);
                    match d.resolve(&chunk(key), ReadConsistency::Linearizable).await {
                        Ok(b) => history.complete(h, Ret::Read(b.as_ref().map(value_of))),
                        Err(_) => history.discard(h),
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    tracing::info!(%leader, "nemesis: isolate the leader");
    c.router().isolate(leader);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    tracing::info!("nemesis: heal");
    c.router().heal();
    for t in tasks {
        t.await?;
    }

    tracing::info!("--- phase 2: check the history");
    let h = history.history();
    let completed = h.ops.iter().filter(|o| o.complete.is_some()).count();
    let reads = h
        .ops
        .iter()
        .filter(|o| o.call == Call::Read && o.complete.is_some())
        .count();
    let pending = h.ops.iter().filter(|o| o.complete.is_none()).count();
    tracing::info!(
        ops = h.ops.len(),
        completed,
        reads,
        pending,
        "history recorded"
    );
    assert!(completed >= 60, "only {completed} operations completed");
    assert!(reads >= 20, "only {reads} reads completed");
    let verdict = check_registers(&h, None, CheckLimits::default());
    assert!(
        matches!(verdict, Verdict::Linearizable { .. }),
        "{verdict:?}"
    );
    assert!(c.router().stats().refused > 0, "the isolation never bit");
    c.shutdown().await?;
    Ok(())
}
