//! The bench's client process: connects to the server, runs the phases alternately over the
//! repetitions, prints the table and the ratio lines.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::opts::Opts;
use super::phases::{
    measure, tcp_phase, transport_phase, verified_then_unverified, Tally, Verifying,
};
use super::{ns, PAYLOAD_BYTES, REPETITIONS};
use crate::{BlockReceiver, MemorySource, NodeIdentity, PeerAddr, QuicTransport, Transport};
use kvfabric_progress::{Progress, Unit};
use kvfabric_store::BlockId;

/// The client's side of one run: warm-up, the measured repetitions, the report.
pub(crate) async fn bench(
    opts: &Opts,
    dir: &std::path::Path,
    server_pid: u32,
    ids: &[BlockId],
    addrs: [&String; 5],
) -> anyhow::Result<()> {
    let identity = NodeIdentity::load_from_dir(dir, "node2")?;
    let lo = "127.0.0.1:0".parse()?;
    let empty = Arc::new(MemorySource::new());
    let tuned = QuicTransport::bind(opts.tuned(), &identity, lo, empty.clone()).await?;
    let stock = QuicTransport::bind(opts.stock(), &identity, lo, empty).await?;
    let tuned_peer = PeerAddr::new("node1", addrs[0].parse()?);
    let stock_peer = PeerAddr::new("node1", addrs[1].parse()?);
    #[cfg(feature = "ucx")]
    let mut ucx = super::ucx::UcxPhases::bind(opts, addrs[3], addrs[4]).await?;
    let mut tcp = tokio::net::TcpStream::connect(addrs[2].as_str()).await?;
    tcp.set_nodelay(true)?;
    let count = opts.blocks * opts.rounds;
    let block_bytes = PAYLOAD_BYTES + kvfabric_store::HEADER_LEN;
    println!(
        "kvfabric transport bench: {} blocks x {block_bytes} B, {count} fetches x {REPETITIONS} per phase ({:.2} GB), fetches_in_flight_max {} (UCX get mode: {})",
        opts.blocks,
        (count * REPETITIONS * block_bytes) as f64 / 1e9,
        opts.inflight,
        opts.get_inflight
    );
    println!("tuned: {:?}", opts.tuning);
    #[cfg(feature = "ucx")]
    println!(
        "ucx: libucx {:?}, {:?}, get over shared memory: tls {:?}",
        crate::ucx::ucx_version(),
        opts.ucx,
        opts.ucx_shm_tls
    );

    let bar = Progress::new(
        "bench transport",
        REPETITIONS as u64,
        Unit::Items("repetitions"),
    );
    bar.message("warm-up");
    // Warm-up: connections, MTU discovery, allocator.
    tcp_phase(&mut tcp, opts.blocks).await?;
    transport_phase(&tuned, &tuned_peer, ids, opts.blocks, opts.inflight, |id| {
        Verifying(BlockReceiver::new(ns(), id))
    })
    .await?;
    if !opts.skip_stock {
        transport_phase(&stock, &stock_peer, ids, opts.blocks, opts.inflight, |id| {
            Verifying(BlockReceiver::new(ns(), id))
        })
        .await?;
    }
    #[cfg(feature = "ucx")]
    ucx.warm_up(ids, opts.blocks).await?;

    let (mut b, mut a, mut c, mut s) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    for _ in 0..REPETITIONS {
        bar.message("(b) tcp");
        measure(server_pid, &mut b, tcp_phase(&mut tcp, count)).await?;
        bar.message("(a) quic verified, (c) unverified");
        verified_then_unverified(
            server_pid,
            &tuned,
            &tuned_peer,
            ids,
            count,
            opts.inflight,
            &mut a,
            &mut c,
        )
        .await?;
        #[cfg(feature = "ucx")]
        {
            bar.message("ucx phases");
            ucx.repetition(server_pid, ids, count).await?;
        }
        if !opts.skip_stock {
            bar.message("(s) quic stock");
            // Stock settings are slow; a third of the bytes gives the same precision.
            let n = (count / 3).max(1);
            measure(
                server_pid,
                &mut s,
                transport_phase(&stock, &stock_peer, ids, n, opts.inflight, |id| {
                    Verifying(BlockReceiver::new(ns(), id))
                }),
            )
            .await?;
        }
        bar.inc(1);
    }
    bar.finish();
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
    ucx.report(row)?;
    #[cfg(not(feature = "ucx"))]
    println!("{:<40} not built (build with the `ucx` feature)", "(d) ucx");
    if std::env::var_os("BENCH_STATS").is_some() {
        for (name, client, peer) in [
            ("tuned", &tuned, &tuned_peer),
            ("stock", &stock, &stock_peer),
        ] {
            println!(
                "{name} path: {:?}",
                client.connection_stats(peer).map(|s| (
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
    }
    tuned.close().await;
    stock.close().await;
    #[cfg(feature = "ucx")]
    ucx.close(&b).await;
    // Last, always: what scripts read.
    println!("ratio quic_over_tcp {:.3}", a.gbps() / b.gbps());
    Ok(())
}
