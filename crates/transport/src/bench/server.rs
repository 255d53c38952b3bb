//! The bench's second process: serves the blocks over QUIC (tuned and stock), plain TCP,
//! TLS over TCP (the (t) baseline), and UCX where built (`ucx` feature) and on loopback, all
//! on `--bind IP` (127.0.0.1 unless told; the veth rows bind the server's veth address).
//!
//! Prints `id HEX` per block, then `ready QUIC_TUNED QUIC_STOCK TCP TLS_TCP UCX UCX_SHM` (the
//! UCX transport over `--ucx-tls`, and one over `--ucx-shm-tls` that stages the blocks it
//! leases in UCX shared memory; `-` when not built or not on loopback), then serves until its
//! standard input closes (the parent exiting or dropping the pipe ends it).

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use crate::conformance::sources::test_block;
use crate::{MemorySource, NodeIdentity, QuicTransport, Transport};
use bytes::Bytes;
use kvfabric_store::NamespaceKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::opts::Opts;
use super::{ns, PAYLOAD_BYTES};

/// The bench's blocks, deterministic per index.
pub(crate) fn blocks(namespace: NamespaceKey, n: usize) -> Vec<kvfabric_store::VerifiedBlock> {
    (0..n)
        .map(|i| test_block(namespace, PAYLOAD_BYTES, i as u64 + 1))
        .collect()
}

/// TCP baseline protocol: the client sends a u32 count; the server sends that many blocks
/// (round robin), each as a u64 LE length then the bytes. A count of 0 ends the connection.
async fn serve_tcp(mut stream: TcpStream, blocks: Arc<Vec<Bytes>>) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let mut next = 0usize;
    loop {
        let count = stream.read_u32_le().await?;
        if count == 0 {
            return Ok(());
        }
        for _ in 0..count {
            let b = &blocks[next % blocks.len()];
            next += 1;
            stream.write_u64_le(b.len() as u64).await?;
            stream.write_all(b).await?;
        }
    }
}

/// Serves the bench's blocks until standard input closes.
pub(crate) fn run(dir: &Path, opts: &Opts) -> anyhow::Result<()> {
    let rt = super::runtime(opts.server_workers)?;
    rt.block_on(async {
        let blocks = blocks(ns(), opts.blocks);
        let source = Arc::new(MemorySource::new());
        let mut out = std::io::stdout().lock();
        for b in &blocks {
            writeln!(out, "id {}", b.id().to_hex())?;
            source.insert(b.clone());
        }
        let identity = NodeIdentity::load_from_dir(dir, "node1")?;
        let ip = opts.bind.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
        let lo = std::net::SocketAddr::new(ip, 0);
        let tuned = QuicTransport::bind(opts.tuned(), &identity, lo, source.clone()).await?;
        let stock = QuicTransport::bind(opts.stock(), &identity, lo, source.clone()).await?;
        #[cfg(feature = "ucx")]
        let ucx = match ip.is_loopback() {
            true => Some((
                crate::UcxTransport::bind(opts.tuned(), "node1", lo, source.clone()).await?,
                crate::UcxTransport::bind(
                    opts.ucx_get(&opts.ucx_shm_tls, true),
                    "node1",
                    lo,
                    source.clone(),
                )
                .await?,
            )),
            false => None,
        };
        #[cfg(feature = "ucx")]
        let ucx_addr = match &ucx {
            Some((u, shm)) => format!("{} {}", u.local_addr(), shm.local_addr()),
            None => "- -".to_string(),
        };
        #[cfg(not(feature = "ucx"))]
        let ucx_addr = "- -".to_string();
        let tcp = TcpListener::bind(lo).await?;
        let tls_tcp = std::net::TcpListener::bind(lo)?;
        let tls_addr = tls_tcp.local_addr()?;
        let raw: Arc<Vec<Bytes>> = Arc::new(
            blocks
                .into_iter()
                .map(|b| Bytes::from(b.into_bytes()))
                .collect(),
        );
        super::tls_tcp::serve(tls_tcp, &identity, raw.clone())?;
        writeln!(
            out,
            "ready {} {} {} {tls_addr} {ucx_addr}",
            tuned.local_addr(),
            stock.local_addr(),
            tcp.local_addr()?
        )?;
        out.flush()?;
        drop(out);
        tokio::spawn(async move {
            while let Ok((s, _)) = tcp.accept().await {
                tokio::spawn(serve_tcp(s, raw.clone()));
            }
        });
        // Serve until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let stdin = std::io::stdin();
            for _ in stdin.lock().lines() {}
        })
        .await?;
        // Closed and waited for, not dropped: a dropped UCX transport tears down on its progress
        // thread while this process exits, and UCX's library destructors running beside that
        // teardown crashed the server (SIGSEGV) after a run whose every row had passed.
        tuned.close().await;
        stock.close().await;
        #[cfg(feature = "ucx")]
        if let Some((u, shm)) = ucx {
            u.close().await;
            shm.close().await;
        }
        Ok(())
    })
}
