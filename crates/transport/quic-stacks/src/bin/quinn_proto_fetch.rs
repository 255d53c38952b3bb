//! The bench's verified fetch over quinn-proto 0.11 (the state machine under quinn, with the
//! same rustls and ring as kvfabric), driven like the quiche fetcher: one thread per process,
//! no async runtime, GSO sends of up to 64 KiB and GRO receives (`kvfabric_quic_stacks::udp`).
//! It separates what quinn's protocol work costs from what its tokio driver adds. Windows as
//! kvfabric's path rule sets them (8 MiB per stream, 32 MiB per connection and for sending);
//! datagrams sized to the link's MTU (the path is known, so no MTU discovery). `SEGMENTS=N`
//! caps the datagrams per send at N instead (quinn's own driver caps them at 10).
//!
//! ```text
//! quinn-proto-fetch serve ADDR DIR BLOCKS MTU
//! quinn-proto-fetch fetch ADDR DIR BLOCKS ROUNDS MTU
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail};
use bytes::{Bytes, BytesMut};
use kvfabric_quic_stacks::udp::{Socket, SEND_BYTES};
use kvfabric_quic_stacks::{self as w, Receiver};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ReadError, ServerConfig, StreamEvent, StreamId, TransportConfig, VarInt,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn transport(mtu: u16) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(1 << 16))
        .stream_receive_window(VarInt::from_u32(8 << 20))
        .receive_window(VarInt::from_u32(32 << 20))
        .send_window(32 << 20)
        .initial_mtu(mtu - 28)
        .min_mtu(1200)
        .mtu_discovery_config(None)
        .enable_segmentation_offload(true);
    Arc::new(t)
}

fn endpoint(mtu: u16, server: Option<Arc<ServerConfig>>) -> anyhow::Result<Endpoint> {
    let mut e = EndpointConfig::default();
    e.max_udp_payload_size(mtu - 28)?;
    Ok(Endpoint::new(Arc::new(e), server, false, None))
}

/// One connection, its endpoint and its socket.
struct Driver {
    sock: Socket,
    ep: Endpoint,
    ch: ConnectionHandle,
    conn: Connection,
    out: Vec<u8>,
    response: Vec<u8>,
    max_datagrams: usize,
}

impl Driver {
    /// Sends what the connection has, then passes its events to the endpoint and back.
    fn flush(&mut self) -> anyhow::Result<()> {
        let now = Instant::now();
        loop {
            self.out.clear();
            let Some(t) = self
                .conn
                .poll_transmit(now, self.max_datagrams, &mut self.out)
            else {
                break;
            };
            let segment = t.segment_size.unwrap_or(t.size);
            self.sock
                .send(&self.out[..t.size], segment, t.destination)?;
        }
        while let Some(ev) = self.conn.poll_endpoint_events() {
            if let Some(back) = self.ep.handle_event(self.ch, ev) {
                self.conn.handle_event(back);
            }
        }
        Ok(())
    }

    /// Hands the connection everything waiting on the socket; true if anything was.
    fn drain(&mut self) -> anyhow::Result<bool> {
        let mut any = false;
        loop {
            // A buffer per receive: the connection keeps stream data as slices of it.
            let mut buf = BytesMut::zeroed(1 << 16);
            let Some(r) = self.sock.recv(&mut buf)? else {
                return Ok(any);
            };
            any = true;
            buf.truncate(r.len);
            let now = Instant::now();
            while !buf.is_empty() {
                let datagram = buf.split_to(r.segment.min(buf.len()));
                let local = Some(self.sock.local.ip()).filter(|ip| !ip.is_unspecified());
                match self
                    .ep
                    .handle(now, r.from, local, None, datagram, &mut self.response)
                {
                    Some(DatagramEvent::ConnectionEvent(_, ev)) => self.conn.handle_event(ev),
                    Some(DatagramEvent::Response(t)) => {
                        self.sock
                            .send(&self.response[..t.size], t.size, t.destination)?;
                        self.response.clear();
                    }
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        self.ep.ignore(incoming);
                    }
                    None => {}
                }
            }
        }
    }

    /// Sends, then takes in what arrived, waiting for it or the connection's timer.
    fn step(&mut self) -> anyhow::Result<()> {
        self.flush()?;
        if !self.drain()? {
            let timeout = self
                .conn
                .poll_timeout()
                .map(|t| t.saturating_duration_since(Instant::now()));
            self.sock.wait(timeout);
            self.drain()?;
        }
        let now = Instant::now();
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        if self.conn.is_closed() {
            bail!("connection closed");
        }
        Ok(())
    }
}

/// `SEGMENTS`, when set: the most datagrams one send may carry.
fn segments() -> Option<usize> {
    std::env::var("SEGMENTS").ok().and_then(|v| v.parse().ok())
}

fn new_driver(
    sock: Socket,
    ep: Endpoint,
    ch: ConnectionHandle,
    conn: Connection,
    mtu: u16,
) -> Driver {
    Driver {
        sock,
        ep,
        ch,
        conn,
        out: Vec::with_capacity(SEND_BYTES),
        response: Vec::new(),
        max_datagrams: segments().unwrap_or(SEND_BYTES / usize::from(mtu - 28)),
    }
}

fn serve(addr: SocketAddr, dir: &str, blocks: u32, mtu: u16) -> anyhow::Result<()> {
    let data: Vec<Bytes> = (0..blocks).map(|i| Bytes::from(w::block(i))).collect();
    let cert = CertificateDer::from_pem_file(format!("{dir}/cert.pem"))?;
    let key = PrivateKeyDer::from_pem_file(format!("{dir}/key.pem"))?;
    let mut sc = ServerConfig::with_single_cert(vec![cert], key)?;
    sc.transport_config(transport(mtu));
    let mut ep = endpoint(mtu, Some(Arc::new(sc)))?;
    let sock = Socket::bind(addr)?;
    println!("ready");
    let mut response = Vec::new();
    // The first datagram is the client's Initial.
    let (ch, conn) = loop {
        sock.wait(None);
        let mut buf = BytesMut::zeroed(1 << 16);
        let Some(r) = sock.recv(&mut buf)? else {
            continue;
        };
        buf.truncate(r.len);
        let now = Instant::now();
        if let Some(DatagramEvent::NewConnection(incoming)) =
            ep.handle(now, r.from, Some(addr.ip()), None, buf, &mut response)
        {
            break ep
                .accept(incoming, now, &mut response, None)
                .map_err(|e| anyhow!("accept: {:?}", e.cause))?;
        }
    };
    let mut d = new_driver(sock, ep, ch, conn, mtu);
    let mut answers: Vec<(StreamId, Answer)> = Vec::new();
    loop {
        if let Err(e) = d.step() {
            // The client closes the connection when it is done.
            eprintln!("server: {e}");
            return Ok(());
        }
        while let Some(ev) = d.conn.poll() {
            if let Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) = ev {
                while let Some(id) = d.conn.streams().accept(Dir::Bi) {
                    answers.push((id, Answer::Asking(Vec::new())));
                }
            }
        }
        for (id, answer) in answers.iter_mut() {
            if let Answer::Asking(req) = answer {
                let mut recv = d.conn.recv_stream(*id);
                let mut chunks = recv.read(true)?;
                while let Ok(Some(c)) = chunks.next(usize::MAX) {
                    req.extend_from_slice(&c.bytes);
                }
                let _ = chunks.finalize();
                if req.len() < 4 {
                    continue;
                }
                *answer =
                    Answer::Sending(match u32::from_le_bytes([req[0], req[1], req[2], req[3]]) {
                        w::CPU_REQUEST => Bytes::from(w::cpu_seconds().to_le_bytes().to_vec()),
                        i => data
                            .get(i as usize)
                            .cloned()
                            .ok_or_else(|| anyhow!("stream {id}: no block {i}"))?,
                    });
            }
            if let Answer::Sending(left) = answer {
                let mut send = d.conn.send_stream(*id);
                let mut chunks = [left.clone()];
                if send.write_chunks(&mut chunks).is_ok() {
                    *left = chunks[0].clone();
                }
                if left.is_empty() {
                    send.finish()?;
                    *answer = Answer::Sent;
                }
            }
        }
        answers.retain(|(_, a)| !matches!(a, Answer::Sent));
    }
}

/// Where the server is with a stream.
enum Answer {
    /// Reading the 4-byte request (what has arrived of it).
    Asking(Vec<u8>),
    /// Writing the answer: what is left of it.
    Sending(Bytes),
    /// Written and finished.
    Sent,
}

/// Asks for `i` on a new stream and receives the answer into `rx`.
fn request(d: &mut Driver, i: u32, rx: &mut Receiver) -> anyhow::Result<()> {
    let id = d
        .conn
        .streams()
        .open(Dir::Bi)
        .ok_or_else(|| anyhow!("no stream left to open"))?;
    d.conn.send_stream(id).write(&i.to_le_bytes())?;
    d.conn.send_stream(id).finish()?;
    rx.reset();
    loop {
        d.step()?;
        while d.conn.poll().is_some() {}
        let mut recv = d.conn.recv_stream(id);
        let mut chunks = recv.read(true)?;
        let mut done = false;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(c)) => rx.extend(&c.bytes),
                Ok(None) => {
                    done = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(e) => bail!("stream {id}: {e}"),
            }
        }
        let _ = chunks.finalize();
        if done {
            return Ok(());
        }
    }
}

fn fetch(addr: SocketAddr, dir: &str, blocks: u32, rounds: u32, mtu: u16) -> anyhow::Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(format!("{dir}/cert.pem"))?)?;
    let mut cc = ClientConfig::with_root_certificates(Arc::new(roots))?;
    cc.transport_config(transport(mtu));
    let mut ep = endpoint(mtu, None)?;
    let sock = Socket::bind("0.0.0.0:0".parse()?)?;
    let (ch, conn) = ep.connect(Instant::now(), cc, addr, "localhost")?;
    let mut d = new_driver(sock, ep, ch, conn, mtu);
    while d.conn.is_handshaking() {
        d.step()?;
    }
    let stack = match segments() {
        Some(n) => format!("quinn-proto ({n} datagrams a send)"),
        None => "quinn-proto (64 KiB sends)".to_string(),
    };
    w::measure(&stack, mtu, blocks, rounds, |i, rx| request(&mut d, i, rx))?;
    d.conn.close(
        Instant::now(),
        VarInt::from_u32(0),
        Bytes::from_static(b"done"),
    );
    d.flush()
}

fn main() -> anyhow::Result<()> {
    w::dispatch(serve, fetch)
}
