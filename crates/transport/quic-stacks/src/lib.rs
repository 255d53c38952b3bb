//! The workload every fetcher here runs, so that each stack is measured on the same bytes and
//! with the same checks as `kvfabric bench transport`'s phase (a): blocks of 4,497,472 bytes
//! (a DeepSeek-V3 BF16 block with its header), one bidirectional stream per fetch, one fetch
//! in flight, each block hashed with blake3 as it arrives and checked against its id; CPU time
//! of client and server over the same interval (the server reports its own when asked).

pub mod udp;

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::ensure;

/// Bytes per block: `kvfabric bench transport`'s 4,497,408-byte payload and 64-byte header.
const BLOCK_BYTES: usize = 4_497_472;
/// The request for the server's CPU seconds (8 bytes, little-endian `f64`) instead of a block.
pub const CPU_REQUEST: u32 = u32::MAX;
/// Blocks fetched before measuring, so that the path's MTU and the windows have settled.
const WARM_UP: u32 = 8;
/// Bytes received before they are hashed (as kvfabric's receiver hashes in runs, not per
/// packet).
const HASH_RUN: usize = 256 << 10;

/// Block `i`'s bytes: blake3's output stream keyed by the index (incompressible, repeatable).
pub fn block(i: u32) -> Vec<u8> {
    let mut out = vec![0u8; BLOCK_BYTES];
    let mut h = blake3::Hasher::new();
    h.update(&i.to_le_bytes());
    h.finalize_xof().fill(&mut out);
    out
}

/// The ids of blocks `0..n`.
fn ids(n: u32) -> Vec<blake3::Hash> {
    (0..n).map(|i| blake3::hash(&block(i))).collect()
}

/// This process's user + system CPU seconds.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// A block arriving in pieces: copied (or received) into one buffer and hashed in runs of
/// [`HASH_RUN`]. The buffer keeps its size across blocks, so receiving into it never clears it.
pub struct Receiver {
    buf: Vec<u8>,
    len: usize,
    hasher: blake3::Hasher,
    hashed: usize,
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver {
            buf: vec![0; BLOCK_BYTES],
            len: 0,
            hasher: blake3::Hasher::new(),
            hashed: 0,
        }
    }
}

impl Receiver {
    /// Starts the next block.
    pub fn reset(&mut self) {
        self.len = 0;
        self.hasher.reset();
        self.hashed = 0;
    }

    /// Appends bytes that arrived.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.spare(bytes.len()).copy_from_slice(bytes);
        self.commit(bytes.len());
    }

    /// Room for `n` more bytes, to be received into directly and then [`Self::commit`]ted.
    pub fn spare(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() < self.len + n {
            self.buf.resize(self.len + n, 0);
        }
        &mut self.buf[self.len..self.len + n]
    }

    /// Keeps `n` bytes written into [`Self::spare`]'s room.
    pub fn commit(&mut self, n: usize) {
        self.len += n;
        self.hash_pending(HASH_RUN);
    }

    fn hash_pending(&mut self, at_least: usize) {
        if self.len - self.hashed >= at_least {
            self.hasher.update(&self.buf[self.hashed..self.len]);
            self.hashed = self.len;
        }
    }

    /// The answer as it arrived (no check).
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Checks the received block against `id`.
    pub fn verify(&mut self, i: u32, id: &blake3::Hash) -> anyhow::Result<()> {
        self.hash_pending(0);
        ensure!(
            self.len == BLOCK_BYTES && self.hasher.finalize() == *id,
            "block {i}: expected {BLOCK_BYTES} bytes hashing to its id, found {} bytes that do not",
            self.len
        );
        Ok(())
    }
}

/// The server's CPU seconds from its answer to a [`CPU_REQUEST`].
fn parse_cpu(bytes: &[u8]) -> anyhow::Result<f64> {
    let b: [u8; 8] = bytes.try_into().map_err(|_| {
        anyhow::anyhow!("server CPU reply: expected 8 bytes, found {}", bytes.len())
    })?;
    Ok(f64::from_le_bytes(b))
}

/// The fetch side of every stack: [`WARM_UP`] fetches, then every block `rounds` times,
/// each checked against its id, timed, with both processes' CPU over that interval; prints
/// `STACK fetch, verified, mtu M: G GB/s, CPU s/GB client+server T = C + S`, the line `run`
/// collects. `request(i, rx)` asks the server for `i` and receives the whole answer into `rx`.
pub fn measure(
    stack: &str,
    mtu: u16,
    blocks: u32,
    rounds: u32,
    mut request: impl FnMut(u32, &mut Receiver) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let ids = ids(blocks);
    let mut rx = Receiver::default();
    let mut fetch = |i: u32, rx: &mut Receiver| -> anyhow::Result<f64> {
        request(i, rx)?;
        match i {
            CPU_REQUEST => parse_cpu(rx.bytes()),
            i => rx.verify(i, &ids[i as usize]).map(|()| 0.0),
        }
    };
    for i in (0..WARM_UP).map(|i| i % blocks) {
        fetch(i, &mut rx)?;
    }
    let server0 = fetch(CPU_REQUEST, &mut rx)?;
    let (start, client0) = (Instant::now(), cpu_seconds());
    for _ in 0..rounds {
        for i in 0..blocks {
            fetch(i, &mut rx)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let client = cpu_seconds() - client0;
    let server = fetch(CPU_REQUEST, &mut rx)? - server0;
    let gb = (u64::from(rounds) * u64::from(blocks) * BLOCK_BYTES as u64) as f64 / 1e9;
    println!(
        "{stack} fetch, verified, mtu {mtu}: {:.2} GB/s, CPU s/GB client+server {:.2} = {:.2} + {:.2}",
        gb / secs,
        (client + server) / gb,
        client / gb,
        server / gb
    );
    Ok(())
}

/// Writes a self-signed certificate for `localhost` and its key to `DIR/cert.pem` and
/// `DIR/key.pem`.
fn certs(dir: &str) -> anyhow::Result<()> {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
    std::fs::write(format!("{dir}/cert.pem"), c.cert.pem())?;
    std::fs::write(format!("{dir}/key.pem"), c.signing_key.serialize_pem())?;
    Ok(())
}

/// What a fetcher was asked to do.
enum Cmd {
    Certs(String),
    Serve {
        addr: SocketAddr,
        dir: String,
        blocks: u32,
        mtu: u16,
    },
    Fetch {
        addr: SocketAddr,
        dir: String,
        blocks: u32,
        rounds: u32,
        mtu: u16,
    },
}

fn parse_args(args: &[String]) -> anyhow::Result<Cmd> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match a.as_slice() {
        ["certs", dir] => Cmd::Certs(dir.to_string()),
        ["serve", addr, dir, blocks, mtu] => Cmd::Serve {
            addr: addr.parse()?,
            dir: dir.to_string(),
            blocks: blocks.parse()?,
            mtu: mtu.parse()?,
        },
        ["fetch", addr, dir, blocks, rounds, mtu] => Cmd::Fetch {
            addr: addr.parse()?,
            dir: dir.to_string(),
            blocks: blocks.parse()?,
            rounds: rounds.parse()?,
            mtu: mtu.parse()?,
        },
        _ => anyhow::bail!(
            "expected `certs DIR`, `serve ADDR DIR BLOCKS MTU` or `fetch ADDR DIR BLOCKS ROUNDS MTU`, \
             found {a:?}"
        ),
    })
}

/// A fetcher's `main`: parses the command line and runs `certs`, or the stack's `serve` (ADDR
/// DIR BLOCKS MTU: serve BLOCKS blocks on ADDR with the certificate in DIR) or `fetch` (ADDR DIR
/// BLOCKS ROUNDS MTU: fetch every block ROUNDS times, trusting the certificate in DIR).
pub fn dispatch(
    serve: impl FnOnce(SocketAddr, &str, u32, u16) -> anyhow::Result<()>,
    fetch: impl FnOnce(SocketAddr, &str, u32, u32, u16) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args)? {
        Cmd::Certs(dir) => certs(&dir),
        Cmd::Serve {
            addr,
            dir,
            blocks,
            mtu,
        } => serve(addr, &dir, blocks, mtu),
        Cmd::Fetch {
            addr,
            dir,
            blocks,
            rounds,
            mtu,
        } => fetch(addr, &dir, blocks, rounds, mtu),
    }
}
