//! `kvfabric bench transport`: the transport crate's benchmark (`kvfabric_transport::bench`,
//! the same code as `cargo bench -p kvfabric-transport --bench bench_transport`): 4.5 MB
//! blocks between this process and a server process (this binary again, `bench transport
//! --serve DIR`) on loopback and, as root, across a veth pair between two network namespaces
//! (MTU 1500 and 9000; the client side is this binary again, `--veth-client`), QUIC (and UCX
//! on loopback when built with the `ucx` feature) against a plain TCP copy and against TCP +
//! rustls + blake3. It says `veth rows: skipped (REASON)` when it cannot make namespaces. The
//! closing ratio lines and their order are in `kvfabric_transport::bench`'s docs; the last is
//! always `ratio quic_over_tcp <value>` (loopback).

use clap::Args;

/// Arguments of `kvfabric bench transport`: the bench's own options, passed through to its
/// parser (one parser for both entry points), which rejects unknown ones.
#[derive(Debug, Clone, Args)]
pub(crate) struct TransportArgs {
    /// Options: --blocks N (16), --rounds R (20), --inflight K (1), --get-inflight K (2, UCX
    /// get mode), --workers N (1),
    /// --server-workers N (1), --mtu B, --max-udp B, --stream-window B, --conn-window B,
    /// --send-window B, --socket-buffer B, --no-mtud, --gso, --fair, --no-adapt (configured
    /// QUIC settings on every path), --skip-stock, --no-veth, --veth-only; with the
    /// `ucx` feature --ucx-tls TLS, --ucx-shm-tls TLS (get mode over shared memory: sm,tcp),
    /// --ucx-chunk B, --ucx-posted N, --ucx-set NAME=VALUE.
    #[arg(
        value_name = "OPTIONS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    options: Vec<String>,
}

/// Runs `kvfabric bench transport` (or, with `--serve DIR`, its server process).
pub(crate) fn run(a: TransportArgs) -> anyhow::Result<()> {
    kvfabric_transport::bench::run(&a.options, &["bench", "transport"]).map(drop)
}
