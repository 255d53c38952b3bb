//! Transport benchmark (`bench` feature): 4.5 MB blocks over loopback between two processes,
//! in one run. One body behind both `cargo bench -p kvfabric-transport --bench
//! bench_transport [-- OPTIONS]` and `kvfabric bench transport [OPTIONS]`.
//!
//! The bench spawns its own executable as the server process (the caller's `server_args`,
//! then `--serve DIR` and the options), then measures, alternating phases over three
//! repetitions and summing: (b) a plain TCP copy of the same bytes (tokio, no TLS) — the
//! baseline; (a) QUIC fetch with verification; (c) QUIC fetch without verification (same
//! receive path, a sink that copies but does not hash); (s) QUIC with quinn's stock MTU and
//! window settings, verified; where built (the `ucx` feature): (d)/(du) UCX stream mode,
//! verified and not (over TCP on loopback unless `--ucx-tls` says otherwise), (gt) UCX get
//! mode over TCP (gets emulated by UCX), verified, and (g)/(gu) UCX get mode over
//! `--ucx-shm-tls` (default `sm,tcp`; the server stages leased blocks in UCX shared memory, so
//! a get is one copy by the reader), verified and not. Each prints GB/s, its ratio to (b), and
//! CPU seconds per GB (client + server process). With UCX the lines `ratio ucx_over_tcp
//! <d / b>`, `ratio ucx_get_tcp_over_tcp <gt / b>` and `ratio ucx_get_over_tcp <g / b>` come
//! first; the last line is always `ratio quic_over_tcp <a / b>`.
//!
//! Options (forwarded to the server process): `--blocks N` distinct blocks (16), `--rounds R`
//! fetches of each per repetition (20), `--inflight K` fetches in flight (1; QUIC and UCX
//! stream mode), `--get-inflight K` in the UCX get-mode phases (2: the server stages the next
//! leased block while the client reads this one), `--workers N`
//! and `--server-workers N` tokio threads per process (1 each: two processes, two cores),
//! `--mtu`, `--max-udp`, `--stream-window`, `--conn-window`, `--send-window`,
//! `--socket-buffer` (bytes), `--no-mtud`, `--gso`, `--fair`, `--skip-stock`; for UCX
//! `--ucx-tls TLS`, `--ucx-shm-tls TLS`, `--ucx-chunk BYTES`, `--ucx-posted N`,
//! `--ucx-set NAME=VALUE`. With
//! `BENCH_STATS=1` it also prints quinn's path statistics of both client connections.

mod client;
mod cpu;
mod opts;
mod phases;
mod server;
#[cfg(feature = "ucx")]
mod ucx;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};
use kvfabric_store::{BlockId, NamespaceKey};

use crate::generate_cluster;
use opts::Opts;

/// A DeepSeek-V3 BF16 block's payload: 61 × 64 × (512 + 64) × 2 bytes.
pub(crate) const PAYLOAD_BYTES: usize = 4_497_408;
/// Times each phase runs (alternating with the others); the figures are sums over them.
pub(crate) const REPETITIONS: usize = 3;

/// The namespace every bench block lives in.
pub(crate) fn ns() -> NamespaceKey {
    NamespaceKey::derive("bench")
}

/// Runs the bench with the options in `args` (see the module docs), or, when `args` holds
/// `--serve DIR`, its server process. `server_args` are what this executable needs before
/// `--serve` to reach this function again (none for the cargo bench target; `bench transport`
/// for `kvfabric`). Prints the table and the ratio lines on standard output.
pub fn run(args: &[String], server_args: &[&str]) -> anyhow::Result<()> {
    let opts = Opts::parse(args)?;
    if let Some(dir) = &opts.serve {
        return server::run(dir, &opts);
    }
    opts.tuned().validate()?;
    let dir = tempfile::tempdir()?;
    generate_cluster(dir.path(), 2)?;
    let (mut child, ids, [quic_tuned, quic_stock, tcp_addr, ucx_addr, ucx_shm_addr]) =
        spawn_server(dir.path(), &opts, server_args)?;
    let result = runtime(opts.workers).and_then(|rt| {
        rt.block_on(client::bench(
            &opts,
            dir.path(),
            child.id(),
            &ids,
            [
                &quic_tuned,
                &quic_stock,
                &tcp_addr,
                &ucx_addr,
                &ucx_shm_addr,
            ],
        ))
    });
    drop(child.stdin.take());
    child.wait()?;
    result
}

/// Starts the server process and reads its block ids and addresses (QUIC tuned, QUIC stock,
/// TCP, UCX over `--ucx-tls` and UCX over `--ucx-shm-tls` with staged leases, or `-`).
fn spawn_server(
    dir: &Path,
    opts: &Opts,
    server_args: &[&str],
) -> anyhow::Result<(Child, Vec<BlockId>, [String; 5])> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(server_args)
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
            ["ready", a, b, c, d, e] => {
                let addrs = [a, b, c, d, e].map(|s| s.to_string());
                return Ok((child, ids, addrs));
            }
            _ => bail!("unexpected line from the server: {line}"),
        }
    }
    bail!("server exited before it was ready")
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
