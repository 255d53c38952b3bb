//! `kvfabric bench transport`: the transport crate's benchmark (`kvfabric_transport::bench`,
//! the same code as `cargo bench -p kvfabric-transport --bench bench_transport`): 4.5 MB
//! blocks between this process and a server process (this binary again, `bench transport
//! --serve DIR`) on loopback, QUIC (and UCX when built with the `ucx` feature: stream mode,
//! and get mode over TCP and over shared memory) against a plain TCP copy; with UCX the lines
//! `ratio ucx_over_tcp`, `ratio ucx_get_tcp_over_tcp` and `ratio ucx_get_over_tcp` come before
//! the last line, always `ratio quic_over_tcp <value>`.

use clap::Args;

/// Arguments of `kvfabric bench transport`: the bench's own options, passed through to its
/// parser (one parser for both entry points), which rejects unknown ones.
#[derive(Debug, Clone, Args)]
pub(crate) struct TransportArgs {
    /// Options: --blocks N (16), --rounds R (20), --inflight K (1), --get-inflight K (2, UCX
    /// get mode), --workers N (1),
    /// --server-workers N (1), --mtu B, --max-udp B, --stream-window B, --conn-window B,
    /// --send-window B, --socket-buffer B, --no-mtud, --gso, --fair, --skip-stock; with the
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
    kvfabric_transport::bench::run(&a.options, &["bench", "transport"])
}
