//! `kvfabric bench replication`: the copy a put makes, pushed (what the fabric does) against
//! pulled (what it did before issue 14), in one run. Two QUIC endpoints in this process on
//! loopback, under mutual TLS from a fresh cluster CA, each serving an in-memory source:
//!
//! - **push**: the putting side sends the sealed block on the block transport; the receiver
//!   verifies it with the streaming receiver, installs it and answers (one round trip).
//! - **pull** (the baseline, kept only here): the putting side asks the receiver, in a message
//!   on a channel of the same endpoint, to take a copy; the receiver fetches the block from
//!   the putting side (verified as it lands), installs it and answers the message: A→B, B→A,
//!   A→B, B→A — the removed `replicate` control request's path.
//!
//! A "put" is: seal the block (hash its bytes into a verified block), install it on the
//! putting side, make one copy; "copy" is the last step alone. Neither has HTTP nor the
//! directory claim (a Raft commit the node runs beside the copies, the same either way). Push
//! and pull alternate (push, pull, pull, push, …), each put on a fresh block. Last lines:
//! `ratio push_copy_over_pull_p50` and `ratio push_put_over_pull_p50` (below 1: push is
//! faster). `--plot FILE` draws the printed figures ([`Report::bars`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use kvfabric_store::{
    BlockHeader, BlockId, ModelGeometry, NamespaceKey, StreamingId, VerifiedBlock, HEADER_LEN,
};
use kvfabric_test_support::presets::{builtin, payload};
use kvfabric_transport::source::{SourceFuture, SourceTask};
use kvfabric_transport::{
    generate_cluster, Accepted, BlockSource, Channel, MessageHandler, Messenger, NodeIdentity,
    PeerAddr, QuicTransport, SourceLookup, Transport, TransportConfig, TransportFuture,
};

use crate::plot::{Bar, PlotArg};

/// Arguments of `kvfabric bench replication`.
#[derive(Debug, Args)]
pub(crate) struct ReplicationArgs {
    /// Puts per way (push and pull alternate).
    #[arg(long, default_value_t = 200)]
    ops: u64,
    /// The model whose block size the blocks have.
    #[arg(long, default_value = "minicpm3-4b")]
    model: String,
    #[command(flatten)]
    plot: PlotArg,
}

/// The pull request's channel (this bench's only; the node has none).
const PULL: Channel = Channel {
    alpn: b"kvfabric-bench-pull/1",
    message_bytes_max: 64,
    handle_timeout_ms: 30_000,
};

/// Each side's store: the newest block it took or sealed (the run's thousands of blocks are
/// not all kept in memory), and how many it took.
#[derive(Default)]
struct Newest {
    block: RwLock<Option<(NamespaceKey, BlockId, Bytes)>>,
    taken: AtomicU64,
}

impl Newest {
    fn install(&self, b: VerifiedBlock) {
        let key = (b.namespace(), b.id());
        *self.block.write().unwrap_or_else(|p| p.into_inner()) =
            Some((key.0, key.1, Bytes::from(b.into_bytes())));
        self.taken.fetch_add(1, Ordering::Relaxed);
    }
}

impl BlockSource for Newest {
    fn lookup(&self, namespace: NamespaceKey, id: BlockId) -> SourceFuture<'_> {
        let found = match &*self.block.read().unwrap_or_else(|p| p.into_inner()) {
            Some((n, i, bytes)) if *n == namespace && *i == id => {
                SourceLookup::Found(bytes.clone())
            }
            _ => SourceLookup::NotFound,
        };
        Box::pin(async move { found })
    }

    fn accept(&self, block: VerifiedBlock) -> SourceTask<'_, Accepted> {
        self.install(block);
        Box::pin(async { Accepted::Stored })
    }
}

/// The receiving side's answer to a pull request: fetch from the putting side, install.
struct PullHandler {
    transport: Arc<QuicTransport>,
    source: Arc<Newest>,
    from: PeerAddr,
}

impl MessageHandler for PullHandler {
    fn handle(&self, request: Vec<u8>) -> TransportFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move {
            let (ns, id) = request.split_at_checked(32)?;
            let ns = NamespaceKey(ns.try_into().ok()?);
            let id = BlockId(id.try_into().ok()?);
            let block = self.transport.fetch(&self.from, ns, id).await.ok()?;
            self.source.install(block);
            Some(b"stored".to_vec())
        })
    }
}

/// A block of model `g` whose payload is `body` with its first 8 bytes set to `seed` (a
/// fresh block each time), sealed: its id hashed from its bytes, once.
fn seal(ns: NamespaceKey, g: &ModelGeometry, body: &[u8], seed: u64) -> VerifiedBlock {
    let mut bytes = BlockHeader::for_geometry(g).encode().to_vec();
    bytes.extend_from_slice(body);
    bytes[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&seed.to_le_bytes());
    let mut hasher = StreamingId::new(&ns);
    hasher.update(&bytes);
    let id = hasher.finalize();
    VerifiedBlock::from_stream(ns, id, &hasher, bytes).expect("hashed from these bytes")
}

fn p(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    s[((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1]
}

/// Runs the benchmark.
pub(crate) fn run(a: ReplicationArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.ops > 0, "--ops: expected at least 1, found 0");
    a.plot.check()?;
    let dir =
        std::env::temp_dir().join(format!("kvfabric-bench-replication-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(bench(&a, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    report.print();
    let title = format!(
        "kvfabric bench replication: {} puts each way, {}, QUIC on loopback",
        a.ops, a.model
    );
    a.plot.write_bars(&title, &report.bars())
}

/// One way's latencies, ms.
#[derive(Debug, Default)]
struct Way {
    /// Seal, local install and the copy.
    put: Vec<f64>,
    /// The copy alone.
    copy: Vec<f64>,
}

/// What the run measured.
#[derive(Debug)]
struct Report {
    push: Way,
    pull: Way,
}

impl Report {
    /// The ways' p50 and p99 of puts and copies, and the ratios.
    fn print(&self) {
        println!(
            "{:<6} {:>10} {:>10} {:>10} {:>10}",
            "way", "put p50", "put p99", "copy p50", "copy p99"
        );
        for (name, w) in [("push", &self.push), ("pull", &self.pull)] {
            println!(
                "{name:<6} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>8.2}ms",
                p(&w.put, 0.5),
                p(&w.put, 0.99),
                p(&w.copy, 0.5),
                p(&w.copy, 0.99)
            );
        }
        println!(
            "ratio push_copy_over_pull_p50 {:.3}",
            p(&self.push.copy, 0.5) / p(&self.pull.copy, 0.5)
        );
        println!(
            "ratio push_put_over_pull_p50 {:.3}",
            p(&self.push.put, 0.5) / p(&self.pull.put, 0.5)
        );
    }

    /// The chart of what [`Report::print`] prints: p50 and p99 (ms) of puts and copies,
    /// push (the fabric's way) first, pull (the baseline) second.
    fn bars(&self) -> Vec<Bar> {
        let mut bars = Vec::new();
        for (q, unit) in [(0.5, "p50 (ms)"), (0.99, "p99 (ms)")] {
            for (series, w) in [("push", &self.push), ("pull", &self.pull)] {
                bars.push(Bar::new(
                    "put (seal + install + copy)",
                    series,
                    p(&w.put, q),
                    unit,
                ));
                bars.push(Bar::new("copy", series, p(&w.copy, q), unit));
            }
        }
        bars
    }
}

/// Both ways, alternating; the report is printed by the caller.
async fn bench(a: &ReplicationArgs, dir: &std::path::Path) -> anyhow::Result<Report> {
    generate_cluster(dir, 2)?;
    let g = builtin(&a.model);
    let ns = NamespaceKey::derive("bench replication");
    let bind = |name: &'static str, source: Arc<Newest>| async move {
        let identity = NodeIdentity::load_from_dir(dir, name)?;
        anyhow::Ok(Arc::new(
            QuicTransport::bind_with_channels(
                TransportConfig::default(),
                &identity,
                "127.0.0.1:0".parse().expect("an address"),
                source,
                vec![PULL],
            )
            .await?,
        ))
    };
    let (src_a, src_b) = (Arc::new(Newest::default()), Arc::new(Newest::default()));
    let a_side = bind("node1", src_a.clone()).await?;
    let b_side = bind("node2", src_b.clone()).await?;
    b_side.serve(
        PULL,
        Arc::new(PullHandler {
            transport: b_side.clone(),
            source: src_b.clone(),
            from: a_side.local_peer(),
        }),
    )?;
    let b = b_side.local_peer();
    let body = payload(&g, 1);
    println!(
        "kvfabric bench replication: {} puts each way of {} bytes, one copy each, QUIC on loopback, push and pull alternating (ABBA)",
        a.ops,
        body.len()
    );
    let (mut push, mut pull_way) = (Way::default(), Way::default());
    let warmup = 5;
    for i in 0..(a.ops + warmup) * 2 {
        // push, pull, pull, push, …: neither way always follows the other.
        let pull = (i % 4 == 1) || (i % 4 == 2);
        let t = Instant::now();
        let block = seal(ns, &g, &body, i);
        let id = block.id();
        src_a.install(block.clone());
        let c = Instant::now();
        if pull {
            let mut req = ns.0.to_vec();
            req.extend_from_slice(&id.0);
            let answer = a_side
                .call(PULL, &b, req, Duration::from_secs(30))
                .await
                .context("a pull request")?;
            if answer != b"stored" {
                bail!("pull of {id}: expected 'stored', found {answer:?}");
            }
        } else {
            a_side.push(&b, &block).await.context("a push")?;
        }
        let (put_ms, copy_ms) = (
            t.elapsed().as_secs_f64() * 1e3,
            c.elapsed().as_secs_f64() * 1e3,
        );
        if src_b.taken.load(Ordering::Relaxed) != i + 1 {
            bail!("block {id} is not held by the receiver after its copy");
        }
        if i >= warmup * 2 {
            let way = if pull { &mut pull_way } else { &mut push };
            way.put.push(put_ms);
            way.copy.push(copy_ms);
        }
    }
    a_side.close().await;
    b_side.close().await;
    Ok(Report {
        push,
        pull: pull_way,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::testing::value_of;

    #[test]
    fn the_chart_rows_are_the_printed_percentiles() {
        let ms: Vec<f64> = (1..=100).map(f64::from).collect();
        let r = Report {
            push: Way {
                put: ms.clone(),
                copy: vec![2.0, 4.0],
            },
            pull: Way {
                put: ms.iter().map(|m| m + 1.0).collect(),
                copy: vec![3.0],
            },
        };
        let bars = r.bars();
        let find = |group: &str, series: &str, unit: &str| value_of(&bars, group, series, unit);
        let put = "put (seal + install + copy)";
        assert_eq!(find(put, "push", "p50 (ms)"), 50.0);
        assert_eq!(find(put, "pull", "p99 (ms)"), 100.0);
        assert_eq!(find("copy", "push", "p50 (ms)"), 2.0);
        assert_eq!(find("copy", "push", "p99 (ms)"), 4.0);
        assert_eq!(find("copy", "pull", "p50 (ms)"), 3.0);
        assert_eq!(bars.len(), 8);
        assert_eq!(
            bars[0].series, "push",
            "the fabric's way first: the first colour"
        );
    }
}
