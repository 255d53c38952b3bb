//! Transport benchmark (`bench` feature): 4.5 MB blocks between two processes, on loopback
//! and, as root, across a real network path (two network namespaces joined by a veth pair at
//! MTU 1500 and then 9000), in one run. One body behind both `cargo bench -p
//! kvfabric-transport --bench bench_transport [-- OPTIONS]` and `kvfabric bench transport
//! [OPTIONS]`.
//!
//! On each path the bench spawns its own executable as the server process (the caller's
//! `server_args`, then `--serve DIR` and the options; on veth under `ip netns exec` in the
//! server's namespace, and the measuring client likewise in the other namespace,
//! `--veth-client`), then measures, alternating phases over three repetitions and summing:
//! (b) a plain TCP copy of the same bytes (tokio, no TLS) — the baseline; (t) TCP + rustls
//! (the cluster's mTLS) + blake3 over each block against its id, what a user would build
//! instead (`tls_tcp`); (a) QUIC fetch with verification; (c) QUIC fetch without verification
//! (same receive path, a sink that copies but does not hash); (s) QUIC with quinn's stock MTU
//! and window settings, verified; on loopback and where built (the `ucx` feature): (d)/(du)
//! UCX stream mode, verified and not (over TCP unless `--ucx-tls` says otherwise), (gt) UCX
//! get mode over TCP (gets emulated by UCX), verified, and (g)/(gu) UCX get mode over
//! `--ucx-shm-tls` (default `sm,tcp`; the server stages leased blocks in UCX shared memory, so
//! a get is one copy by the reader), verified and not. QUIC takes its settings from the path
//! rule (`crate::quic::path`, the node's own): the configured ones on loopback, GSO-sized
//! datagrams found by MTU discovery, with GSO, on veth. Each path prints a table (GB/s, ratio
//! to that path's (b), CPU seconds per GB of client + server process); [`run`] returns the
//! rows ([`BenchReport`]).
//!
//! Then the closing lines, in this order: `veth rows: skipped (REASON)` when they did not run
//! (`--no-veth`, not root, `ip netns` failing); with UCX `ratio ucx_over_tcp`, `ratio
//! ucx_get_tcp_over_tcp`, `ratio ucx_get_over_tcp` (loopback); `ratio quic_over_tls_tcp`
//! (loopback, a / t); `ratio quic_veth9000_over_tcp`, `ratio quic_veth9000_over_tls_tcp`;
//! `ratio quic_veth_over_tcp`, `ratio quic_veth_over_tls_tcp` (MTU 1500); last, always, `ratio
//! quic_over_tcp` (loopback, a / b). A ratio whose rows did not run reads `n/a`.
//!
//! Options (forwarded to the server process): `--blocks N` distinct blocks (16), `--rounds R`
//! fetches of each per repetition (20), `--inflight K` fetches in flight (1; QUIC, TLS-TCP
//! connections and UCX stream mode), `--get-inflight K` in the UCX get-mode phases (2: the
//! server stages the next leased block while the client reads this one), `--workers N` and
//! `--server-workers N` tokio threads per process (1 each: two processes, two cores), `--mtu`,
//! `--max-udp`, `--stream-window`, `--conn-window`, `--send-window`, `--socket-buffer`
//! (bytes), `--no-mtud`, `--gso`, `--fair`, `--no-join` (each of quinn's batches its own send,
//! `quic::coalesce`), `--no-adapt` (the configured QUIC settings on every path), `--skip-stock`, `--no-veth` (loopback only), `--veth-only`; for UCX
//! `--ucx-tls TLS`, `--ucx-shm-tls TLS`, `--ucx-chunk BYTES`, `--ucx-posted N`, `--ucx-set
//! NAME=VALUE`. With `BENCH_STATS=1` it also prints quinn's path statistics of both client
//! connections.

mod client;
mod cpu;
mod netns;
mod opts;
mod phases;
mod report;
mod server;
mod tls_tcp;
#[cfg(feature = "ucx")]
mod ucx;

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use anyhow::{bail, Context};
use kvfabric_store::{BlockId, NamespaceKey};

use crate::generate_cluster;
use netns::{Side, VethPair};
use opts::Opts;
pub use report::{veth_path, BenchReport, Row, VethRows, LOOPBACK};

/// The veth rows' MTUs, in the order measured.
pub const VETH_MTUS: [u32; 2] = [1500, 9000];

/// A DeepSeek-V3 BF16 block's payload: 61 × 64 × (512 + 64) × 2 bytes.
pub(crate) const PAYLOAD_BYTES: usize = 4_497_408;
/// Times each phase runs (alternating with the others); the figures are sums over them.
pub(crate) const REPETITIONS: usize = 3;

/// The namespace every bench block lives in.
pub(crate) fn ns() -> NamespaceKey {
    NamespaceKey::derive("bench")
}

/// Runs the bench with the options in `args` (see the module docs), or, when `args` holds
/// `--serve DIR` or `--veth-client DIR`, one of its child processes (whose report is empty, or
/// its client's rows). `server_args` are what this executable needs before its options to
/// reach this function again (none for the cargo bench target; `bench transport` for
/// `kvfabric`). Prints the tables and the closing lines on standard output and returns what it
/// measured.
pub fn run(args: &[String], server_args: &[&str]) -> anyhow::Result<BenchReport> {
    let opts = Opts::parse(args)?;
    if let Some(dir) = &opts.serve {
        server::run(dir, &opts)?;
        return Ok(BenchReport::default());
    }
    if let Some(c) = &opts.veth_client {
        return veth_client(&opts, c);
    }
    opts.tuned().validate()?;
    let dir = tempfile::tempdir()?;
    generate_cluster(dir.path(), 2)?;
    let mut report = BenchReport::default();
    if !opts.veth_only {
        let rows = loopback(&opts, dir.path(), server_args)?;
        print_table(&rows);
        report.rows.extend(rows);
    }
    report.veth = if opts.no_veth {
        VethRows::Skipped("--no-veth".into())
    } else {
        match VethPair::create() {
            Err(reason) => VethRows::Skipped(reason),
            Ok(pair) => {
                let measured = veth_rows(&pair, &opts, dir.path(), server_args);
                drop(pair);
                if let Some(signal) = netns::interrupted() {
                    bail!("interrupted by signal {signal}; the network namespaces are removed");
                }
                let rows = measured?;
                report.rows.extend(rows);
                VethRows::Ran
            }
        }
    };
    for line in report.summary_lines() {
        println!("{line}");
    }
    Ok(report)
}

/// Prints one path's table.
fn print_table(rows: &[Row]) {
    for line in report::table(rows) {
        println!("{line}");
    }
}

/// The loopback rows: the server process on 127.0.0.1, the client in this process.
fn loopback(opts: &Opts, dir: &Path, server_args: &[&str]) -> anyhow::Result<Vec<Row>> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(server_args);
    let mut server = spawn_server(command, dir, opts, None)?;
    let result = runtime(opts.workers).and_then(|rt| {
        rt.block_on(client::bench(
            opts,
            dir,
            server.child.id(),
            &server.ids,
            &server.addrs,
            Ipv4Addr::LOCALHOST.into(),
            LOOPBACK,
        ))
    });
    // The client's failure first: a server that failed after it is a consequence.
    let stopped = server.stop();
    let rows = result?;
    stopped?;
    Ok(rows)
}

/// The veth rows at each of [`VETH_MTUS`]: a fresh server and client process per MTU, one in
/// each namespace.
fn veth_rows(
    pair: &VethPair,
    opts: &Opts,
    dir: &Path,
    server_args: &[&str],
) -> anyhow::Result<Vec<Row>> {
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for mtu in VETH_MTUS {
        pair.set_mtu(mtu)?;
        let path = veth_path(mtu);
        let mut command = pair.command(Side::Server, &exe);
        command.args(server_args);
        let mut server = spawn_server(command, dir, opts, Some(netns::SERVER_IP.into()))?;
        pair.watch_child(0, server.child.id());
        let measured = veth_client_process(pair, &exe, server_args, dir, opts, &server, &path);
        pair.watch_child(0, 0);
        server.stop()?;
        let measured = measured.with_context(|| format!("the {path} rows"))?;
        print_table(&measured);
        rows.extend(measured);
    }
    Ok(rows)
}

/// Runs the measuring client in the client namespace, echoes what it prints and collects its
/// rows.
fn veth_client_process(
    pair: &VethPair,
    exe: &Path,
    server_args: &[&str],
    dir: &Path,
    opts: &Opts,
    server: &ServerProcess,
    path: &str,
) -> anyhow::Result<Vec<Row>> {
    let ids: Vec<String> = server.ids.iter().map(|id| id.to_hex()).collect();
    let a = &server.addrs;
    let mut child = pair
        .command(Side::Client, exe)
        .args(server_args)
        .arg("--veth-client")
        .arg(dir)
        .args(["--server-pid", &server.child.id().to_string()])
        .args(["--ids", &ids.join(",")])
        .args([
            "--addrs",
            &[&a.quic_tuned, &a.quic_stock, &a.tcp, &a.tls_tcp]
                .map(|s| s.as_str())
                .join(","),
        ])
        .args(&opts.raw)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning the veth client process")?;
    pair.watch_child(1, child.id());
    let stdout = child.stdout.take().context("veth client stdout")?;
    let mut rows = Vec::new();
    let mut bad = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        match line.strip_prefix("row ") {
            Some(rest) => match Row::from_wire(path, rest) {
                Ok(row) => rows.push(row),
                Err(e) => bad = bad.or(Some(e)),
            },
            None => println!("{line}"),
        }
    }
    let status = child.wait()?;
    pair.watch_child(1, 0);
    if !status.success() {
        bail!(
            "the veth client process (in {}) failed: {status}",
            pair.names()[1]
        );
    }
    if let Some(e) = bad {
        return Err(e);
    }
    Ok(rows)
}

/// The veth client process: measures against the server its parent names, prints its header
/// lines and a `row` line per phase for the parent.
fn veth_client(opts: &Opts, c: &opts::VethClient) -> anyhow::Result<BenchReport> {
    let addrs = ServerAddrs {
        quic_tuned: c.addrs[0].clone(),
        quic_stock: c.addrs[1].clone(),
        tcp: c.addrs[2].clone(),
        tls_tcp: c.addrs[3].clone(),
        ucx: "-".into(),
        ucx_shm: "-".into(),
    };
    let path = "veth";
    let rows = runtime(opts.workers)?.block_on(client::bench(
        opts,
        &c.dir,
        c.server_pid,
        &c.ids,
        &addrs,
        Ipv4Addr::UNSPECIFIED.into(),
        path,
    ))?;
    for r in &rows {
        println!("{}", r.wire());
    }
    Ok(BenchReport {
        rows,
        veth: VethRows::NotApplicable,
    })
}

/// The server process's addresses, as its `ready` line gives them (`-` for a UCX transport
/// not built or not bound).
pub(crate) struct ServerAddrs {
    pub(crate) quic_tuned: String,
    pub(crate) quic_stock: String,
    pub(crate) tcp: String,
    pub(crate) tls_tcp: String,
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) ucx: String,
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) ucx_shm: String,
}

/// A running server process; [`ServerProcess::stop`] ends it (closing its standard input).
struct ServerProcess {
    child: Child,
    ids: Vec<BlockId>,
    addrs: ServerAddrs,
    /// Held open until the end: the server's output after `ready`, if any, goes nowhere.
    _stdout: BufReader<ChildStdout>,
}

impl ServerProcess {
    /// Closes its standard input and waits for it.
    fn stop(&mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the bench's server process failed: {status}");
        }
        Ok(())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Still running only when the bench failed before `stop`.
        if let Ok(None) = self.child.try_wait() {
            drop(self.child.stdin.take());
            let _ = self.child.wait();
        }
    }
}

/// Starts the server process (`command` with `--serve DIR`, `--bind IP` when given, and the
/// options) and reads its block ids and addresses.
fn spawn_server(
    mut command: Command,
    dir: &Path,
    opts: &Opts,
    bind: Option<IpAddr>,
) -> anyhow::Result<ServerProcess> {
    command.arg("--serve").arg(dir);
    if let Some(ip) = bind {
        command.args(["--bind", &ip.to_string()]);
    }
    let mut child = command
        .args(&opts.raw)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning the server process")?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut stdout = BufReader::new(stdout);
    let mut ids = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            drop(child.stdin.take());
            let status = child.wait()?;
            bail!("the server process exited before it was ready: {status}");
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["id", hex] => ids.push(BlockId::from_hex(hex)?),
            ["ready", q, s, t, tls, u, shm] => {
                let addrs = ServerAddrs {
                    quic_tuned: q.to_string(),
                    quic_stock: s.to_string(),
                    tcp: t.to_string(),
                    tls_tcp: tls.to_string(),
                    ucx: u.to_string(),
                    ucx_shm: shm.to_string(),
                };
                return Ok(ServerProcess {
                    child,
                    ids,
                    addrs,
                    _stdout: stdout,
                });
            }
            _ => {
                drop(child.stdin.take());
                let _ = child.wait();
                bail!("unexpected line from the server: {line:?}");
            }
        }
    }
}

/// A runtime of `workers` threads, or the calling thread alone when that is 0.
pub(crate) fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let rt = match workers {
        0 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    };
    rt.context("starting the async runtime")
}
