//! The kvfabric side: 3 directory members in this process, each on its own QUIC endpoint on
//! loopback carrying the Raft channel as a node's does (mTLS under a fresh cluster CA), each
//! with its own store (a WAL for the log, redb for the snapshot).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use kvfabric_core::cluster::net::{raft_channel, RaftNet};
use kvfabric_directory::{
    Batcher, Directory, DirectoryConfig, NodeId, ReadConsistency, ShardId, SystemClock,
};
use kvfabric_progress::{Progress, Unit};
use kvfabric_store::Tier;
use kvfabric_transport::{
    MemorySource, Messenger, NodeIdentity, QuicTransport, Transport, TransportConfig,
};

use crate::report::{block_of, dir_bytes, pick, rss_bytes, Latency, Side};
use crate::DirectoryArgs;

/// Members of the group.
const MEMBERS: u64 = 3;
/// Longest wait for a leader, or for followers to apply every record.
const SETTLE_MS_MAX: u64 = 60_000;

struct Member {
    dir: Directory,
    net: Arc<QuicTransport>,
}

/// Runs the kvfabric side in `work`.
pub(super) async fn run(a: &DirectoryArgs, work: &Path) -> anyhow::Result<Side> {
    let certs = work.join("certs");
    kvfabric_transport::generate_cluster(&certs, MEMBERS as u32)
        .with_context(|| format!("writing certificates into {}", certs.display()))?;
    let defaults = DirectoryConfig::default();
    let config = DirectoryConfig {
        // Leases must outlive the run: an expired lease purges the node's records.
        lease_ms: 24 * 3_600_000,
        batch_delay_ms_max: a.batch_delay_ms.unwrap_or(defaults.batch_delay_ms_max),
        ..defaults
    };
    config.validate()?;
    println!(
        "kvfabric: batch_records_max {}, batch_delay_ms_max {}",
        config.batch_records_max, config.batch_delay_ms_max
    );
    // Each member's one QUIC endpoint, carrying the Raft channel as a node's does.
    let mut nets = Vec::new();
    let mut peers = BTreeMap::new();
    for i in 1..=MEMBERS {
        let identity = NodeIdentity::load_from_dir(&certs, &format!("node{i}"))
            .with_context(|| format!("loading node{i}'s identity"))?;
        let net = QuicTransport::bind_with_channels(
            TransportConfig::default(),
            &identity,
            "127.0.0.1:0".parse().expect("an address"),
            Arc::new(MemorySource::new()),
            vec![raft_channel(&config)],
        )
        .await?;
        peers.insert(NodeId(i), net.local_peer());
        nets.push(Arc::new(net));
    }
    let mut members = Vec::new();
    let mut addrs = BTreeMap::new();
    for (i, net) in (1..=MEMBERS).zip(nets) {
        let raft = Arc::new(RaftNet::new(net.clone(), peers.clone(), &config));
        let dir = Directory::open(
            NodeId(i),
            ShardId(0),
            &work.join(format!("n{i}")),
            config.clone(),
            raft.clone(),
            Arc::new(SystemClock),
        )
        .await?;
        net.serve(raft_channel(&config), raft.server(dir.rpc_server()))?;
        addrs.insert(NodeId(i), peers[&NodeId(i)].addr.to_string());
        members.push(Member { dir, net });
    }
    let result = measure(a, work, &members, addrs).await;
    for m in &members {
        let _ = tokio::time::timeout(Duration::from_secs(5), m.dir.shutdown()).await;
        m.net.close().await;
    }
    result
}

async fn measure(
    a: &DirectoryArgs,
    work: &Path,
    members: &[Member],
    addrs: BTreeMap<NodeId, String>,
) -> anyhow::Result<Side> {
    members[0].dir.initialize(addrs).await?;
    // One bench "node" per member, each registering through its member's batcher (followers
    // forward to the leader, as in the node).
    let deadline = Instant::now() + Duration::from_millis(SETTLE_MS_MAX);
    let mut batchers = Vec::new();
    for (j, m) in members.iter().enumerate() {
        let node = NodeId(101 + j as u64);
        let epoch = loop {
            match m.dir.join(node).await {
                Ok(e) => break e,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "waiting for a leader");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e).context("no leader within the settle time"),
            }
        };
        batchers.push(Arc::new(Batcher::spawn(m.dir.clone(), node, epoch)));
    }
    let leader = members[0].dir.current_leader();
    println!(
        "kvfabric: leader {leader:?}; registering {} records",
        a.records
    );

    let rss_before = rss_bytes(std::process::id()).unwrap_or(0);
    let disk_before = store_bytes(work);
    let t0 = Instant::now();
    let bar = Progress::new("kvfabric registrations", a.records, Unit::Items("records"));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..a.clients {
        let batcher = batchers[c % batchers.len()].clone();
        let (records, clients, bar) = (a.records, a.clients as u64, bar.clone());
        tasks.spawn(async move {
            let mut i = c as u64;
            while i < records {
                batcher.claim(block_of(i), Tier::Host, None).await?;
                bar.inc(1);
                i += clients;
            }
            Ok::<(), kvfabric_directory::DirectoryError>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a registration client panicked")??;
    }
    let reg_s = t0.elapsed().as_secs_f64();
    bar.finish();
    for b in batchers {
        if let Some(b) = Arc::into_inner(b) {
            b.close().await;
        }
    }
    // Every replica must hold every record before anything is read or measured.
    for m in members {
        loop {
            let n = m.dir.view().read(|s| s.block_count()) as u64;
            if n == a.records {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline + Duration::from_secs_f64(reg_s),
                "member {} applied {n} of {} records",
                m.dir.id().0,
                a.records
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let rss_after = rss_bytes(std::process::id()).unwrap_or(0);
    let disk_after = store_bytes(work);
    let per = |b: u64, a2: u64| a2.saturating_sub(b) as f64 / a.records as f64 / MEMBERS as f64;
    let reg_per_s = a.records as f64 / reg_s;
    println!("kvfabric: {} records committed in {reg_s:.2} s", a.records);

    let local = lookups(a, members, ReadConsistency::Local).await?;
    let linearizable = lookups(a, members, ReadConsistency::Linearizable).await?;
    Ok(Side {
        reg_per_s,
        reg_batched: None,
        local,
        linearizable,
        mem: vec![
            (
                "RSS growth of this process over the registrations / records / 3 in-process replicas".into(),
                per(rss_before, rss_after),
            ),
            (
                "store growth (WAL + redb snapshot) / records / 3 members".into(),
                per(disk_before, disk_after),
            ),
        ],
    })
}

/// Bytes on disk of every member's store: its redb file (snapshot) and its WAL directory
/// (the log, with up to a MiB of zeroed space ahead of the write position).
fn store_bytes(work: &Path) -> u64 {
    (1..=MEMBERS)
        .map(|i| {
            dir_bytes(&work.join(format!("n{i}"))) + dir_bytes(&work.join(format!("n{i}.wal")))
        })
        .sum()
}

/// `a.lookups` lookups at `consistency` from `a.clients` concurrent clients spread over the
/// members; every looked-up record must have its owner.
async fn lookups(
    a: &DirectoryArgs,
    members: &[Member],
    consistency: ReadConsistency,
) -> anyhow::Result<Latency> {
    let bar = Progress::new(
        &format!("kvfabric {consistency:?} lookups").to_lowercase(),
        a.lookups,
        Unit::Items("lookups"),
    );
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..a.clients {
        let dir = members[c % members.len()].dir.clone();
        let (lookups, clients, records) = (a.lookups, a.clients as u64, a.records);
        let bar = bar.clone();
        tasks.spawn(async move {
            let mut samples = Vec::new();
            let mut k = c as u64;
            while k < lookups {
                let block = block_of(pick(k, records));
                let t = Instant::now();
                let owners = dir.owners(&block, consistency).await?;
                samples.push(t.elapsed());
                anyhow::ensure!(owners.len() == 1, "block {block:?}: owners {owners:?}");
                bar.inc(1);
                k += clients;
            }
            Ok::<_, anyhow::Error>(samples)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.context("a lookup client panicked")??);
    }
    bar.finish();
    Ok(Latency::of(all))
}
