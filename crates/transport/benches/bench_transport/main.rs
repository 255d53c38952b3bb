//! Transport benchmark: 4.5 MB blocks over loopback between two processes, in one run.
//!
//! `cargo bench -p kvfabric-transport --bench bench_transport [-- OPTIONS]`
//!
//! The bench spawns itself as the server process (`--serve DIR`), then measures, alternating
//! phases over three repetitions and summing: (b) a plain TCP copy of the same bytes (tokio,
//! no TLS) — the baseline; (a) QUIC fetch with verification; (c) QUIC fetch without
//! verification (same receive path, a sink that copies but does not hash); (s) QUIC with
//! quinn's stock MTU and window settings, verified; (d) UCX fetch with verification and (du)
//! without, where built (`--features ucx`; UCX over TCP on loopback unless `--ucx-tls` says
//! otherwise). Each prints GB/s, its ratio to (b), and CPU seconds per GB (client + server
//! process). The last lines are `ratio quic_over_tcp <a / b>` and, with UCX,
//! `ratio ucx_over_tcp <d / b>`.
//!
//! Options (forwarded to the server process): `--blocks N` distinct blocks (16), `--rounds R`
//! fetches of each per repetition (20), `--inflight K` fetches in flight (1), `--workers N`
//! and `--server-workers N` tokio threads per process (1 each: two processes, two cores),
//! `--mtu`, `--max-udp`, `--stream-window`, `--conn-window`, `--send-window`,
//! `--socket-buffer` (bytes), `--no-mtud`, `--gso`, `--fair`, `--skip-stock`; for UCX
//! `--ucx-tls TLS`, `--ucx-chunk BYTES`, `--ucx-posted N`, `--ucx-set NAME=VALUE`. With
//! `BENCH_STATS=1` it also prints quinn's path statistics of both client connections.

mod cpu;
mod opts;
mod server;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kvfabric_store::{BlockId, NamespaceKey};
use kvfabric_transport::{
    generate_cluster, BlockReceiver, MemorySource, NodeIdentity, PayloadSink, PeerAddr,
    QuicTransport, ReceiveError, Transport, TransportError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use opts::Opts;

/// A DeepSeek-V3 BF16 block's payload: 61 × 64 × (512 + 64) × 2 bytes.
pub(crate) const PAYLOAD_BYTES: usize = 4_497_408;
const REPETITIONS: usize = 3;

/// The namespace every bench block lives in.
pub(crate) fn ns() -> NamespaceKey {
    NamespaceKey::derive("bench")
}

/// Copies like the verifying receiver, without hashing: what verification costs.
struct CopySink(Vec<u8>);

impl PayloadSink for CopySink {
    type Output = Vec<u8>;
    fn begin(&mut self, length: u64) {
        self.0 = Vec::with_capacity(length as usize);
    }
    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        self.0.extend_from_slice(chunk);
        Ok(())
    }
    fn finish(self) -> Result<Vec<u8>, ReceiveError> {
        Ok(self.0)
    }
}

#[derive(Default, Clone, Copy)]
struct Tally {
    bytes: u64,
    wall: Duration,
    cpu_client: f64,
    cpu_server: f64,
}

impl Tally {
    fn gbps(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64() / 1e9
    }
    fn cpu_per_gb(&self) -> (f64, f64) {
        let gb = self.bytes as f64 / 1e9;
        (self.cpu_client / gb, self.cpu_server / gb)
    }
}

async fn measure<F: std::future::Future<Output = anyhow::Result<u64>>>(
    server_pid: u32,
    tally: &mut Tally,
    run: F,
) -> anyhow::Result<()> {
    let me = std::process::id();
    let (c0, s0) = (cpu::cpu_seconds(me), cpu::cpu_seconds(server_pid));
    let started = Instant::now();
    tally.bytes += run.await?;
    tally.wall += started.elapsed();
    tally.cpu_client += cpu::cpu_seconds(me) - c0;
    tally.cpu_server += cpu::cpu_seconds(server_pid) - s0;
    Ok(())
}

async fn tcp_phase(stream: &mut tokio::net::TcpStream, count: usize) -> anyhow::Result<u64> {
    stream.write_u32_le(count as u32).await?;
    let mut total = 0u64;
    for _ in 0..count {
        let len = stream.read_u64_le().await?;
        let mut buf = if std::env::var("TCP_REUSE").is_ok() {
            vec![0u8; len as usize]
        } else {
            Vec::with_capacity(len as usize)
        };
        if std::env::var("TCP_REUSE").is_ok() {
            stream.read_exact(&mut buf).await?;
        } else {
            (&mut *stream).take(len).read_to_end(&mut buf).await?;
        }
        anyhow::ensure!(buf.len() as u64 == len, "short TCP block");
        total += len;
    }
    Ok(total)
}

/// Fetches `ids` round-robin `count` times with at most `inflight` in flight, dropping each
/// block as it completes; `fetch` starts one fetch of `id` into a sink.
async fn phase<S, F, Fut>(
    ids: &[BlockId],
    count: usize,
    inflight: usize,
    sink: impl Fn(BlockId) -> S,
    fetch: F,
) -> anyhow::Result<u64>
where
    S: PayloadSink + 'static,
    S::Output: AsRef<[u8]> + 'static,
    F: Fn(BlockId, S) -> Fut,
    Fut: std::future::Future<Output = Result<S::Output, TransportError>> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let (mut next, mut total) = (0usize, 0u64);
    loop {
        while next < count && tasks.len() < inflight {
            let id = ids[next % ids.len()];
            tasks.spawn(fetch(id, sink(id)));
            next += 1;
        }
        match tasks.join_next().await {
            Some(r) => total += r?.context("fetch")?.as_ref().len() as u64,
            None => return Ok(total),
        }
    }
}

/// [`phase`] over QUIC.
async fn quic_phase<S>(
    client: &QuicTransport,
    peer: &PeerAddr,
    ids: &[BlockId],
    count: usize,
    inflight: usize,
    sink: impl Fn(BlockId) -> S,
) -> anyhow::Result<u64>
where
    S: PayloadSink + 'static,
    S::Output: AsRef<[u8]> + 'static,
{
    phase(ids, count, inflight, sink, |id, s| {
        let (c, p) = (client.clone(), peer.clone());
        async move { c.fetch_into(&p, ns(), id, s).await }
    })
    .await
}

/// [`phase`] over UCX.
#[cfg(feature = "ucx")]
async fn ucx_phase<S>(
    client: &kvfabric_transport::UcxTransport,
    peer: &PeerAddr,
    ids: &[BlockId],
    count: usize,
    inflight: usize,
    sink: impl Fn(BlockId) -> S,
) -> anyhow::Result<u64>
where
    S: PayloadSink + 'static,
    S::Output: AsRef<[u8]> + 'static,
{
    phase(ids, count, inflight, sink, |id, s| {
        let (c, p) = (client.clone(), peer.clone());
        async move { c.fetch_into(&p, ns(), id, s).await }
    })
    .await
}

struct Verified(kvfabric_store::VerifiedBlock);
impl AsRef<[u8]> for Verified {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}
struct Verifying(BlockReceiver);
impl PayloadSink for Verifying {
    type Output = Verified;
    fn begin(&mut self, length: u64) {
        self.0.begin(length)
    }
    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        self.0.push(chunk)
    }
    fn finish(self) -> Result<Verified, ReceiveError> {
        self.0.finish().map(Verified)
    }
}

fn spawn_server(
    dir: &std::path::Path,
    opts: &Opts,
) -> anyhow::Result<(Child, Vec<BlockId>, [String; 4])> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--serve")
        .arg(dir)
        .args(&opts.raw)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning the server process")?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut ids = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["id", hex] => ids.push(BlockId::from_hex(hex)?),
            ["ready", a, b, c, d] => {
                let addrs = [a, b, c, d].map(|s| s.to_string());
                return Ok((child, ids, addrs));
            }
            _ => bail!("unexpected line from the server: {line}"),
        }
    }
    bail!("server exited before it was ready")
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = Opts::parse(&args)?;
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        let dir = args.get(i + 1).context("--serve DIR")?;
        return server::run(std::path::Path::new(dir), &opts);
    }
    opts.tuned().validate()?;
    let dir = tempfile::tempdir()?;
    generate_cluster(dir.path(), 2)?;
    let (mut child, ids, [quic_tuned, quic_stock, tcp_addr, ucx_addr]) =
        spawn_server(dir.path(), &opts)?;
    let result = runtime()?.block_on(bench(
        &opts,
        dir.path(),
        child.id(),
        &ids,
        [&quic_tuned, &quic_stock, &tcp_addr, &ucx_addr],
    ));
    drop(child.stdin.take());
    child.wait()?;
    result
}

async fn bench(
    opts: &Opts,
    dir: &std::path::Path,
    server_pid: u32,
    ids: &[BlockId],
    addrs: [&String; 4],
) -> anyhow::Result<()> {
    let identity = NodeIdentity::load_from_dir(dir, "node2")?;
    let lo = "127.0.0.1:0".parse()?;
    let empty = Arc::new(MemorySource::new());
    let tuned = QuicTransport::bind(opts.tuned(), &identity, lo, empty.clone()).await?;
    let stock = QuicTransport::bind(opts.stock(), &identity, lo, empty).await?;
    let tuned_peer = PeerAddr::new("node1", addrs[0].parse()?);
    let stock_peer = PeerAddr::new("node1", addrs[1].parse()?);
    #[cfg(feature = "ucx")]
    let ucx = kvfabric_transport::UcxTransport::bind(
        opts.tuned(),
        "node2",
        lo,
        Arc::new(MemorySource::new()),
    )
    .await?;
    #[cfg(feature = "ucx")]
    let ucx_peer = PeerAddr::new("node1", addrs[3].parse()?);
    let mut tcp = tokio::net::TcpStream::connect(addrs[2].as_str()).await?;
    tcp.set_nodelay(true)?;
    let count = opts.blocks * opts.rounds;
    let block_bytes = PAYLOAD_BYTES + kvfabric_store::HEADER_LEN;
    println!(
        "kvfabric transport bench: {} blocks x {block_bytes} B, {count} fetches x {REPETITIONS} per phase ({:.2} GB), fetches_in_flight_max {}",
        opts.blocks,
        (count * REPETITIONS * block_bytes) as f64 / 1e9,
        opts.inflight
    );
    println!("tuned: {:?}", opts.tuning);
    #[cfg(feature = "ucx")]
    println!(
        "ucx: libucx {:?}, {:?}",
        kvfabric_transport::ucx::ucx_version(),
        opts.ucx
    );

    // Warm-up: connections, MTU discovery, allocator.
    tcp_phase(&mut tcp, opts.blocks).await?;
    quic_phase(&tuned, &tuned_peer, ids, opts.blocks, opts.inflight, |id| {
        Verifying(BlockReceiver::new(ns(), id))
    })
    .await?;
    if !opts.skip_stock {
        quic_phase(&stock, &stock_peer, ids, opts.blocks, opts.inflight, |id| {
            Verifying(BlockReceiver::new(ns(), id))
        })
        .await?;
    }
    #[cfg(feature = "ucx")]
    ucx_phase(&ucx, &ucx_peer, ids, opts.blocks, opts.inflight, |id| {
        Verifying(BlockReceiver::new(ns(), id))
    })
    .await?;

    let (mut b, mut a, mut c, mut s) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    #[cfg(feature = "ucx")]
    let (mut d, mut du) = (Tally::default(), Tally::default());
    for _ in 0..REPETITIONS {
        measure(server_pid, &mut b, tcp_phase(&mut tcp, count)).await?;
        measure(
            server_pid,
            &mut a,
            quic_phase(&tuned, &tuned_peer, ids, count, opts.inflight, |id| {
                Verifying(BlockReceiver::new(ns(), id))
            }),
        )
        .await?;
        measure(
            server_pid,
            &mut c,
            quic_phase(&tuned, &tuned_peer, ids, count, opts.inflight, |_| {
                CopySink(Vec::new())
            }),
        )
        .await?;
        #[cfg(feature = "ucx")]
        {
            measure(
                server_pid,
                &mut d,
                ucx_phase(&ucx, &ucx_peer, ids, count, opts.inflight, |id| {
                    Verifying(BlockReceiver::new(ns(), id))
                }),
            )
            .await?;
            measure(
                server_pid,
                &mut du,
                ucx_phase(&ucx, &ucx_peer, ids, count, opts.inflight, |_| {
                    CopySink(Vec::new())
                }),
            )
            .await?;
        }
        if !opts.skip_stock {
            // Stock settings are slow; a third of the bytes gives the same precision.
            let n = (count / 3).max(1);
            measure(
                server_pid,
                &mut s,
                quic_phase(&stock, &stock_peer, ids, n, opts.inflight, |id| {
                    Verifying(BlockReceiver::new(ns(), id))
                }),
            )
            .await?;
        }
    }
    tcp.write_u32_le(0).await?;
    let counters = tuned.counters();
    anyhow::ensure!(
        counters.verify_failures == 0 && counters.fetches_failed == 0,
        "fetch errors: {counters:?}"
    );

    println!(
        "{:<40} {:>6} {:>7} {:>22}",
        "phase", "GB/s", "x (b)", "CPU s/GB client+server"
    );
    let row = |name: &str, t: &Tally| {
        let (cc, cs) = t.cpu_per_gb();
        println!(
            "{name:<40} {:>6.2} {:>7.2} {:>10.2} = {cc:.2} + {cs:.2}",
            t.gbps(),
            t.gbps() / b.gbps(),
            cc + cs
        );
    };
    row("(b) tcp copy, tokio, no TLS (baseline)", &b);
    row("(a) quic fetch, verified", &a);
    row("(c) quic fetch, unverified", &c);
    if !opts.skip_stock {
        row("(s) quic stock settings, verified", &s);
    }
    #[cfg(feature = "ucx")]
    {
        let counters = ucx.counters();
        anyhow::ensure!(
            counters.verify_failures == 0 && counters.fetches_failed == 0,
            "UCX fetch errors: {counters:?}"
        );
        row("(d) ucx fetch, verified", &d);
        row("(du) ucx fetch, unverified", &du);
    }
    #[cfg(not(feature = "ucx"))]
    println!("{:<40} not built (bench with `--features ucx`)", "(d) ucx");
    if std::env::var_os("BENCH_STATS").is_some() {
        println!(
            "tuned path: {:?}",
            tuned.connection_stats(&tuned_peer).map(|s| (
                s.path,
                s.udp_rx,
                s.udp_tx,
                s.frame_rx.acks,
                s.frame_rx.max_stream_data,
                s.frame_rx.max_data,
                s.frame_tx.acks,
                s.frame_tx.max_stream_data,
                s.frame_tx.max_data
            ))
        );
        println!(
            "stock path: {:?}",
            stock.connection_stats(&stock_peer).map(|s| (
                s.path,
                s.udp_rx,
                s.udp_tx,
                s.frame_rx.acks,
                s.frame_rx.max_stream_data,
                s.frame_rx.max_data,
                s.frame_tx.acks,
                s.frame_tx.max_stream_data,
                s.frame_tx.max_data
            ))
        );
    }
    tuned.close().await;
    stock.close().await;
    println!("ratio quic_over_tcp {:.3}", a.gbps() / b.gbps());
    #[cfg(feature = "ucx")]
    {
        ucx.close().await;
        println!("ratio ucx_over_tcp {:.3}", d.gbps() / b.gbps());
    }
    Ok(())
}

/// This process's runtime: `workers()` threads, or the calling thread alone when that is 0.
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    match workers() {
        0 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
}

/// Tokio worker threads of this process: `--workers N` for the client, `--server-workers N`
/// for the server; one each by default (two processes, two cores here).
pub(crate) fn workers() -> usize {
    let args: Vec<String> = std::env::args().collect();
    let serving = args.iter().any(|a| a == "--serve");
    let (flag, default) = if serving {
        ("--server-workers", 1)
    } else {
        ("--workers", 1)
    };
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
