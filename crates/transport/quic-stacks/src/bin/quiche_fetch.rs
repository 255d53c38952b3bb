//! The bench's verified fetch over quiche 0.30 (Cloudflare; BoringSSL for its crypto). quiche
//! leaves I/O to its caller: one thread per process drives the connection over a socket with
//! GSO sends and GRO receives (`kvfabric_quic_stacks::udp`), the same offloads quinn uses;
//! datagrams sized to the link's MTU (the path is known, so no MTU probing); blocks handed to
//! quiche without a copy (`stream_send_zc`), received straight into the block's buffer;
//! CUBIC, quiche's default. The server serves one connection and exits.
//!
//! ```text
//! quiche-fetch serve ADDR DIR BLOCKS MTU
//! quiche-fetch fetch ADDR DIR BLOCKS ROUNDS MTU
//! ```

use std::net::SocketAddr;

use anyhow::bail;
use bytes::Bytes;
use kvfabric_quic_stacks::udp::{Socket, SEND_BYTES};
use kvfabric_quic_stacks::{self as w, Receiver};

/// Blocks handed to quiche by reference: `Bytes` that split without copying.
#[derive(Clone, Debug, Default)]
struct Shared;

#[derive(Clone, Debug, Default)]
struct SharedBuf(Bytes);

impl AsRef<[u8]> for SharedBuf {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl quiche::BufSplit for SharedBuf {
    fn split_at(&mut self, at: usize) -> Self {
        SharedBuf(self.0.split_off(at))
    }
}

impl quiche::BufFactory for Shared {
    type Buf = SharedBuf;
    type DgramBuf = Vec<u8>;

    fn buf_from_slice(buf: &[u8]) -> SharedBuf {
        SharedBuf(Bytes::copy_from_slice(buf))
    }

    fn dgram_buf_from_slice(buf: &[u8]) -> Vec<u8> {
        buf.to_vec()
    }
}

type Conn = quiche::Connection<Shared>;

fn config(dir: &str, mtu: u16, server: bool) -> anyhow::Result<quiche::Config> {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION)?;
    if server {
        c.load_cert_chain_from_pem_file(&format!("{dir}/cert.pem"))?;
        c.load_priv_key_from_pem_file(&format!("{dir}/key.pem"))?;
    } else {
        c.load_verify_locations_from_file(&format!("{dir}/cert.pem"))?;
        c.verify_peer(true);
    }
    c.set_application_protos(&[b"kvfabric-bench"])?;
    c.set_max_idle_timeout(30_000);
    let payload = usize::from(mtu) - 28;
    c.set_max_recv_udp_payload_size(payload);
    c.set_max_send_udp_payload_size(payload);
    c.set_initial_max_data(64 << 20);
    c.set_initial_max_stream_data_bidi_local(16 << 20);
    c.set_initial_max_stream_data_bidi_remote(16 << 20);
    c.set_initial_max_streams_bidi(1 << 20);
    Ok(c)
}

/// One connection and its socket.
struct Endpoint {
    sock: Socket,
    conn: Conn,
    peer: SocketAddr,
    out: Vec<u8>,
    inb: Vec<u8>,
    payload: usize,
}

impl Endpoint {
    /// Sends every packet the connection has, full-sized ones batched into GSO sends.
    fn flush(&mut self) -> anyhow::Result<()> {
        loop {
            let (mut len, mut n) = (0usize, 0usize);
            while len + self.payload <= SEND_BYTES {
                match self.conn.send(&mut self.out[len..len + self.payload]) {
                    Ok((written, _)) => {
                        len += written;
                        n += 1;
                        // A short packet ends a batch: every segment but the last is full.
                        if written < self.payload {
                            break;
                        }
                    }
                    Err(quiche::Error::Done) => break,
                    Err(e) => bail!("quiche send: {e}"),
                }
            }
            if n == 0 {
                return Ok(());
            }
            self.sock.send(&self.out[..len], self.payload, self.peer)?;
        }
    }

    /// Hands the connection everything waiting on the socket; true if anything was.
    fn drain(&mut self) -> anyhow::Result<bool> {
        let mut any = false;
        while let Some(r) = self.sock.recv(&mut self.inb)? {
            any = true;
            let info = quiche::RecvInfo {
                from: r.from,
                to: self.sock.local,
            };
            for seg in self.inb[..r.len].chunks_mut(r.segment.max(1)) {
                match self.conn.recv(seg, info) {
                    Ok(_) | Err(quiche::Error::Done) => {}
                    Err(e) => eprintln!("quiche recv: {e}"),
                }
            }
        }
        Ok(any)
    }

    /// Sends, then takes in what arrived, waiting for it or the connection's timer.
    fn step(&mut self) -> anyhow::Result<()> {
        self.flush()?;
        if !self.drain()? {
            self.sock.wait(self.conn.timeout());
            self.drain()?;
        }
        if self.conn.timeout().is_some_and(|t| t.is_zero()) {
            self.conn.on_timeout();
        }
        Ok(())
    }
}

fn serve(addr: SocketAddr, dir: &str, blocks: u32, mtu: u16) -> anyhow::Result<()> {
    let data: Vec<Bytes> = (0..blocks).map(|i| Bytes::from(w::block(i))).collect();
    let mut cfg = config(dir, mtu, true)?;
    let sock = Socket::bind(addr)?;
    println!("ready");
    let mut inb = vec![0u8; 1 << 16];
    // The first datagram is the client's Initial.
    let first = loop {
        sock.wait(None);
        if let Some(r) = sock.recv(&mut inb)? {
            break r;
        }
    };
    let hdr = quiche::Header::from_slice(&mut inb[..first.len], quiche::MAX_CONN_ID_LEN)?;
    let scid: Vec<u8> = hdr.dcid.iter().map(|b| b ^ 0xa5).collect();
    let scid = quiche::ConnectionId::from_vec(scid);
    let conn =
        quiche::accept_with_buf_factory::<Shared>(&scid, None, sock.local, first.from, &mut cfg)?;
    let mut ep = Endpoint {
        conn,
        peer: first.from,
        out: vec![0; SEND_BYTES],
        inb,
        payload: usize::from(mtu) - 28,
        sock,
    };
    let info = quiche::RecvInfo {
        from: first.from,
        to: ep.sock.local,
    };
    ep.conn.recv(&mut ep.inb[..first.len], info)?;
    // Answers being sent: stream, bytes, offset.
    let mut sending: Vec<(u64, Bytes, usize)> = Vec::new();
    let mut req = [0u8; 16];
    loop {
        ep.step()?;
        if ep.conn.is_closed() {
            return Ok(());
        }
        for id in ep.conn.readable() {
            while let Ok((n, _)) = ep.conn.stream_recv(id, &mut req) {
                if n < 4 {
                    bail!("stream {id}: expected a 4-byte request, found {n} bytes");
                }
                let bytes = match u32::from_le_bytes([req[0], req[1], req[2], req[3]]) {
                    w::CPU_REQUEST => Bytes::from(w::cpu_seconds().to_le_bytes().to_vec()),
                    i => match data.get(i as usize) {
                        Some(b) => b.clone(),
                        None => bail!("stream {id}: no block {i}"),
                    },
                };
                sending.push((id, bytes, 0));
            }
        }
        for (id, bytes, off) in sending.iter_mut() {
            match ep
                .conn
                .stream_send_zc(*id, SharedBuf(bytes.slice(*off..)), true)
            {
                Ok((n, _)) => *off += n,
                Err(quiche::Error::Done) => {}
                Err(e) => bail!("stream {id}: {e}"),
            }
        }
        sending.retain(|(_, bytes, off)| *off < bytes.len());
    }
}

/// Asks for `i` on a new stream and receives the answer into `rx`.
fn request(ep: &mut Endpoint, stream: &mut u64, i: u32, rx: &mut Receiver) -> anyhow::Result<()> {
    let id = *stream;
    *stream += 4;
    ep.conn.stream_send(id, &i.to_le_bytes(), true)?;
    rx.reset();
    loop {
        ep.step()?;
        if ep.conn.is_closed() {
            bail!("connection closed: {:?}", ep.conn.peer_error());
        }
        loop {
            match ep.conn.stream_recv(id, rx.spare(1 << 20)) {
                Ok((n, fin)) => {
                    rx.commit(n);
                    if fin {
                        return Ok(());
                    }
                }
                Err(quiche::Error::Done) => break,
                Err(e) => bail!("stream {id}: {e}"),
            }
        }
    }
}

fn fetch(addr: SocketAddr, dir: &str, blocks: u32, rounds: u32, mtu: u16) -> anyhow::Result<()> {
    let mut cfg = config(dir, mtu, false)?;
    let sock = Socket::bind("0.0.0.0:0".parse()?)?;
    let scid = quiche::ConnectionId::from_vec(
        blake3::hash(b"quiche-fetch client").as_bytes()[..16].to_vec(),
    );
    let conn = quiche::connect_with_buffer_factory::<Shared>(
        Some("localhost"),
        &scid,
        sock.local,
        addr,
        &mut cfg,
    )?;
    let mut ep = Endpoint {
        conn,
        peer: addr,
        out: vec![0; SEND_BYTES],
        inb: vec![0; 1 << 16],
        payload: usize::from(mtu) - 28,
        sock,
    };
    while !ep.conn.is_established() {
        ep.step()?;
    }
    let mut stream = 0u64;
    w::measure("quiche", mtu, blocks, rounds, |i, rx| {
        request(&mut ep, &mut stream, i, rx)
    })?;
    ep.conn.close(true, 0, b"done")?;
    ep.flush()
}

fn main() -> anyhow::Result<()> {
    w::dispatch(serve, fetch)
}
