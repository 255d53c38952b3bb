//! The bench's (t) baseline: what a user would build instead of the fabric's transport — TCP,
//! rustls with the cluster's mutual TLS (the same generated certificates, TLS 1.3, the same
//! cipher preference), and blake3 over each received block compared with its id. Blocking
//! sockets on a thread per connection, as a plain implementation would be; the same framing
//! as the plain TCP baseline (a u32 count asked, then each block as a u64 LE length and its
//! bytes, round robin over the blocks from the connection's first); one connection per fetch
//! in flight (`--inflight`), each carrying its share of the blocks.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

use anyhow::{ensure, Context};
use bytes::Bytes;
use kvfabric_store::BlockId;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection, StreamOwned};

use super::ns;
use crate::quic::tls;
use crate::NodeIdentity;

/// The baseline's ALPN (it is not the fabric's protocol).
const ALPN: &[u8] = b"kvfabric-bench-tls-tcp";

/// Serves the blocks over TLS on `listener` until the process ends, a thread per connection.
pub(crate) fn serve(
    listener: TcpListener,
    identity: &NodeIdentity,
    blocks: Arc<Vec<Bytes>>,
) -> anyhow::Result<()> {
    let config = Arc::new(tls::server_tls(identity, &[ALPN])?);
    std::thread::Builder::new()
        .name("tls-tcp accept".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, blocks) = (config.clone(), blocks.clone());
                std::thread::spawn(move || {
                    if let Err(e) = serve_one(stream, config, &blocks) {
                        eprintln!("bench transport: TLS-TCP connection: {e:#}");
                    }
                });
            }
        })?;
    Ok(())
}

fn serve_one(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    blocks: &[Bytes],
) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let mut tls = StreamOwned::new(ServerConnection::new(config)?, stream);
    let mut next = 0usize;
    loop {
        let mut count = [0u8; 4];
        tls.read_exact(&mut count)?;
        let count = u32::from_le_bytes(count);
        if count == 0 {
            tls.conn.send_close_notify();
            tls.flush()?;
            return Ok(());
        }
        for _ in 0..count {
            let b = &blocks[next % blocks.len()];
            next += 1;
            tls.write_all(&(b.len() as u64).to_le_bytes())?;
            tls.write_all(b)?;
        }
        tls.flush()?;
    }
}

/// One connection of the client's: the TLS stream and the index of the next block it gets.
struct Conn {
    tls: StreamOwned<ClientConnection, TcpStream>,
    next: usize,
}

/// The client's connections, one per fetch in flight.
pub(crate) struct TlsTcpClient {
    conns: Vec<Conn>,
}

impl TlsTcpClient {
    /// Connects `inflight` connections to `addr` as `identity`, the server being `node1`.
    pub(crate) fn connect(
        addr: SocketAddr,
        identity: &NodeIdentity,
        inflight: usize,
    ) -> anyhow::Result<TlsTcpClient> {
        let config = Arc::new(tls::client_tls(identity, ALPN)?);
        let conns = (0..inflight)
            .map(|_| {
                let stream = TcpStream::connect(addr).with_context(|| format!("TLS-TCP {addr}"))?;
                stream.set_nodelay(true)?;
                let name = ServerName::try_from("node1")?;
                let conn = ClientConnection::new(config.clone(), name)?;
                Ok(Conn {
                    tls: StreamOwned::new(conn, stream),
                    next: 0,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(TlsTcpClient { conns })
    }

    /// Fetches `count` blocks spread over the connections, each on its own thread, every one
    /// hashed and compared with its id; returns the bytes received. Runs on the blocking pool.
    pub(crate) async fn phase(&mut self, ids: &[BlockId], count: usize) -> anyhow::Result<u64> {
        let mut conns = std::mem::take(&mut self.conns);
        let ids = ids.to_vec();
        let (conns, bytes) = tokio::task::spawn_blocking(move || {
            let n = conns.len();
            let bytes = std::thread::scope(|scope| {
                let tasks: Vec<_> = conns
                    .iter_mut()
                    .enumerate()
                    .map(|(i, conn)| {
                        let share = count / n + usize::from(i < count % n);
                        let ids = &ids;
                        scope.spawn(move || fetch(conn, ids, share))
                    })
                    .collect();
                tasks.into_iter().try_fold(0u64, |sum, t| {
                    let got = t
                        .join()
                        .map_err(|_| anyhow::anyhow!("TLS-TCP thread panicked"))?;
                    Ok::<u64, anyhow::Error>(sum + got?)
                })
            })?;
            Ok::<_, anyhow::Error>((conns, bytes))
        })
        .await??;
        self.conns = conns;
        Ok(bytes)
    }

    /// Ends every connection (a count of 0).
    pub(crate) fn close(mut self) {
        for c in &mut self.conns {
            let _ = c.tls.write_all(&0u32.to_le_bytes());
            let _ = c.tls.flush();
        }
    }
}

/// `count` blocks over one connection, each checked against the id the server sent it for.
fn fetch(conn: &mut Conn, ids: &[BlockId], count: usize) -> anyhow::Result<u64> {
    if count == 0 {
        return Ok(0);
    }
    conn.tls.write_all(&(count as u32).to_le_bytes())?;
    conn.tls.flush()?;
    let key = ns().0;
    let mut total = 0u64;
    for _ in 0..count {
        let mut len = [0u8; 8];
        conn.tls.read_exact(&mut len)?;
        let len = u64::from_le_bytes(len);
        ensure!(
            len <= 64 << 20,
            "TLS-TCP block length: expected at most 64 MiB, found {len}"
        );
        let mut buf = vec![0u8; len as usize];
        conn.tls.read_exact(&mut buf)?;
        let id = ids[conn.next % ids.len()];
        conn.next += 1;
        let got = blake3::keyed_hash(&key, &buf);
        ensure!(
            got.as_bytes() == &id.0,
            "TLS-TCP block: expected id {}, found {}",
            id.to_hex(),
            got.to_hex()
        );
        total += len;
    }
    Ok(total)
}
