//! The bench's client: connects to the server, runs the phases alternately over the
//! repetitions and returns what each measured (the caller prints the table).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::opts::Opts;
use super::phases::{
    measure, tcp_phase, transport_phase, verified_then_unverified, Tally, Verifying,
};
use super::report::{Row, LOOPBACK};
use super::tls_tcp::TlsTcpClient;
use super::{ns, ServerAddrs, PAYLOAD_BYTES, REPETITIONS};
use crate::quic::path::PathKind;
use crate::{BlockReceiver, MemorySource, NodeIdentity, PeerAddr, QuicTransport, Transport};
use kvfabric_progress::{Progress, Unit};
use kvfabric_store::BlockId;

/// The client's side of one run on `path` (the server at `addrs`, this side's sockets bound to
/// `local`): warm-up, the measured repetitions, a row per phase. UCX phases run on loopback
/// only (where built).
pub(crate) async fn bench(
    opts: &Opts,
    dir: &std::path::Path,
    server_pid: u32,
    ids: &[BlockId],
    addrs: &ServerAddrs,
    local: IpAddr,
    path: &str,
) -> anyhow::Result<Vec<Row>> {
    let identity = NodeIdentity::load_from_dir(dir, "node2")?;
    let lo = SocketAddr::new(local, 0);
    let empty = Arc::new(MemorySource::new());
    let tuned = QuicTransport::bind(opts.tuned(), &identity, lo, empty.clone()).await?;
    let stock = QuicTransport::bind(opts.stock(), &identity, lo, empty).await?;
    let tuned_peer = PeerAddr::new("node1", addrs.quic_tuned.parse()?);
    let stock_peer = PeerAddr::new("node1", addrs.quic_stock.parse()?);
    #[cfg(feature = "ucx")]
    let mut ucx = match path == LOOPBACK {
        true => Some(super::ucx::UcxPhases::bind(opts, &addrs.ucx, &addrs.ucx_shm).await?),
        false => None,
    };
    let mut tcp = tokio::net::TcpStream::connect(addrs.tcp.as_str()).await?;
    tcp.set_nodelay(true)?;
    let mut tls = TlsTcpClient::connect(addrs.tls_tcp.parse()?, &identity, opts.inflight)?;
    let count = opts.blocks * opts.rounds;
    let block_bytes = PAYLOAD_BYTES + kvfabric_store::HEADER_LEN;
    println!(
        "kvfabric transport bench: {} blocks x {block_bytes} B, {count} fetches x {REPETITIONS} per phase ({:.2} GB), fetches_in_flight_max {} (UCX get mode: {}), path {path}",
        opts.blocks,
        (count * REPETITIONS * block_bytes) as f64 / 1e9,
        opts.inflight,
        opts.get_inflight
    );
    let kind = PathKind::of(tuned_peer.addr);
    println!("tuned ({kind:?} path): {:?}", opts.tuning.for_path(kind));
    #[cfg(feature = "ucx")]
    if ucx.is_some() {
        println!(
            "ucx: libucx {:?}, {:?}, get over shared memory: tls {:?}",
            crate::ucx::ucx_version(),
            opts.ucx,
            opts.ucx_shm_tls
        );
    }

    let bar = Progress::new(
        &format!("bench transport ({path})"),
        REPETITIONS as u64,
        Unit::Items("repetitions"),
    );
    bar.message("warm-up");
    // Warm-up: connections, MTU discovery, allocator.
    tcp_phase(&mut tcp, opts.blocks).await?;
    tls.phase(ids, opts.blocks).await?;
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
    if let Some(ucx) = &ucx {
        ucx.warm_up(ids, opts.blocks).await?;
    }

    let (mut b, mut t, mut a, mut c, mut s) = Default::default();
    for _ in 0..REPETITIONS {
        bar.message("(b) tcp");
        measure(server_pid, &mut b, tcp_phase(&mut tcp, count)).await?;
        bar.message("(t) tls-tcp verified");
        measure(server_pid, &mut t, tls.phase(ids, count)).await?;
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
        if let Some(ucx) = &mut ucx {
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
    tls.close();
    let counters = tuned.counters();
    anyhow::ensure!(
        counters.verify_failures == 0 && counters.fetches_failed == 0,
        "fetch errors: {counters:?}"
    );
    let tally: [(&str, &str, &Tally); 4] = [
        ("b", "(b) tcp copy, tokio, no TLS (baseline)", &b),
        ("t", "(t) tcp + rustls mTLS + blake3, verified", &t),
        ("a", "(a) quic fetch, verified", &a),
        ("c", "(c) quic fetch, unverified", &c),
    ];
    let mut rows: Vec<Row> = tally
        .iter()
        .map(|(code, label, t)| Row::of(path, code, label, t))
        .collect();
    if !opts.skip_stock {
        rows.push(Row::of(path, "s", "(s) quic stock settings, verified", &s));
    }
    #[cfg(feature = "ucx")]
    if let Some(ucx) = ucx {
        for (code, label, t) in ucx.report()? {
            rows.push(Row::of(path, code, label, &t));
        }
        ucx.close().await;
    }
    #[cfg(not(feature = "ucx"))]
    if path == LOOPBACK {
        println!("{:<40} not built (build with the `ucx` feature)", "(d) ucx");
    }
    if let Some(stats) = tuned.connection_stats(&tuned_peer) {
        println!(
            "quic path ({path}): mtu {} B, rtt {:?}, lost {} packets, congestion events {}, \
             {} packets received for {} ACK frames sent",
            stats.path.current_mtu,
            stats.path.rtt,
            stats.path.lost_packets,
            stats.path.congestion_events,
            stats.udp_rx.datagrams,
            stats.frame_tx.acks
        );
    }
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
    Ok(rows)
}
