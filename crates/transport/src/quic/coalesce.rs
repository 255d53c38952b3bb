//! A UDP socket for quinn that joins a connection's consecutive full batches of datagrams into
//! one GSO send.
//!
//! quinn 0.11's connection driver hands its socket at most ten datagrams per transmit
//! (`MAX_TRANSMIT_SEGMENTS`, a constant, not a setting), so at MTU 1500 a block leaves in
//! sends of ten 1,452-byte datagrams: one `sendmsg` and, on the receiving side, one GRO batch,
//! one `recvmsg` and one wake-up per 14.5 KB. Session 21 measured that cap as what bounds the
//! transport at MTU 1500: quinn's own state machine driven with 64 KiB sends reached 0.85–1.04
//! × TLS-TCP on the path where kvfabric's quinn reached 0.74–0.83 (README, "Other QUIC stacks
//! on the same path").
//!
//! [`Coalescing`] wraps quinn's own socket and changes nothing but when bytes leave:
//! - A transmit of exactly the driver's ten full datagrams (a connection with more to send)
//!   is held, and the next transmits to the same destination with the same datagram size are
//!   appended, up to what one send may carry (64 KiB of payload, the kernel's segment limit).
//! - Anything else — a single datagram (every small message: Raft, control, an ACK), a short
//!   batch (the connection has no more to send now), another destination — is sent at once,
//!   after what is held (so one destination's datagrams keep their order).
//! - What is held is sent by a flusher task once the driver has yielded: after one
//!   `yield_now`, so a driver that yielded for fairness (every twenty datagrams) adds its next
//!   batches first. Held bytes wait one scheduler pass at most; a held batch whose send would
//!   block is kept and sent once the socket is writable.
//!
//! A transmit taken into the held batch is reported sent; if its send later fails with an
//! error other than "would block" the batch is dropped (logged at debug) as lost packets would be
//! (QUIC's loss recovery resends them) — quinn's own socket treats most send errors that way.

use std::fmt;
use std::future::poll_fn;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::sync::Notify;

/// The most datagrams quinn 0.11's driver puts in one transmit: a transmit of that many full
/// datagrams comes from a connection with more to send. (Were quinn to change it, transmits
/// would stop matching and be sent at once, as without this socket.)
const DRIVER_SEGMENTS: usize = 10;

/// The largest UDP payload one send may carry (IPv4's limit; IPv6's is 20 bytes more).
const SEND_BYTES_MAX: usize = 65_507;

/// What a held batch is for: transmits join it only if all of this matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    destination: SocketAddr,
    src_ip: Option<IpAddr>,
    ecn: Option<EcnCodepoint>,
    segment: usize,
}

/// Full datagrams of one route, waiting to be sent together.
#[derive(Debug, Default)]
struct Held {
    route: Option<Route>,
    bytes: Vec<u8>,
}

/// What the socket sent, for tests and the bench.
#[derive(Debug, Default)]
pub struct CoalescingStats {
    /// Sends made by this socket (each one `sendmsg`).
    pub sends: AtomicU64,
    /// Datagrams sent.
    pub datagrams: AtomicU64,
}

/// quinn's socket, with consecutive full batches joined (the module docs give the rule).
pub struct Coalescing {
    inner: Arc<dyn AsyncUdpSocket>,
    held: Mutex<Held>,
    wake: Arc<Notify>,
    stats: Arc<CoalescingStats>,
}

impl fmt::Debug for Coalescing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalescing")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Coalescing {
    /// Wraps `inner` and starts its flusher on the current tokio runtime.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>) -> Arc<Coalescing> {
        let socket = Arc::new(Coalescing {
            inner,
            held: Mutex::new(Held::default()),
            wake: Arc::new(Notify::new()),
            stats: Arc::new(CoalescingStats::default()),
        });
        tokio::spawn(flusher(Arc::downgrade(&socket), socket.wake.clone()));
        socket
    }

    /// What this socket has sent.
    pub fn stats(&self) -> Arc<CoalescingStats> {
        self.stats.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes one send of `segment`-byte datagrams may carry.
    fn capacity(&self, segment: usize) -> usize {
        let segments = (SEND_BYTES_MAX / segment).min(self.inner.max_transmit_segments());
        segments * segment
    }

    /// Sends `bytes` on `route` now.
    fn send(&self, route: Route, bytes: &[u8]) -> io::Result<()> {
        let t = Transmit {
            destination: route.destination,
            ecn: route.ecn,
            contents: bytes,
            segment_size: (bytes.len() > route.segment).then_some(route.segment),
            src_ip: route.src_ip,
        };
        self.inner.try_send(&t)?;
        self.stats.sends.fetch_add(1, Ordering::Relaxed);
        let datagrams = bytes.len().div_ceil(route.segment) as u64;
        self.stats.datagrams.fetch_add(datagrams, Ordering::Relaxed);
        Ok(())
    }

    /// Sends what `held` holds: `WouldBlock` keeps it; any other error drops it (as lost
    /// packets, which QUIC resends).
    fn flush_held(&self, held: &mut Held) -> io::Result<()> {
        let Some(route) = held.route else {
            return Ok(());
        };
        match self.send(route, &held.bytes) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
            Err(e) => {
                let lost = held.bytes.len().div_ceil(route.segment);
                tracing::debug!(error = %e, datagrams = lost, "a joined send failed: datagrams lost");
            }
            Ok(()) => {}
        }
        held.route = None;
        held.bytes.clear();
        Ok(())
    }

    /// Sends what is held (the flusher's work).
    fn flush(&self) -> io::Result<()> {
        self.flush_held(&mut self.lock())
    }
}

impl Drop for Coalescing {
    fn drop(&mut self) {
        // Let the flusher see that the socket is gone.
        self.wake.notify_one();
    }
}

impl AsyncUdpSocket for Coalescing {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let segment = t.segment_size.unwrap_or(t.contents.len()).max(1);
        let route = Route {
            destination: t.destination,
            src_ip: t.src_ip,
            ecn: t.ecn,
            segment,
        };
        let full = t.segment_size.is_some() && t.contents.len() == segment * DRIVER_SEGMENTS;
        let capacity = self.capacity(segment);
        let mut held = self.lock();
        // A single datagram no longer than the held ones may end their batch.
        let same_route = held.route.is_some_and(|r| {
            r == route
                || (t.segment_size.is_none()
                    && t.contents.len() <= r.segment
                    && r == Route {
                        segment: r.segment,
                        ..route
                    })
        });
        if same_route && held.bytes.len() + t.contents.len() <= capacity {
            held.bytes.extend_from_slice(t.contents);
            if full && held.bytes.len() + t.contents.len() <= capacity {
                return Ok(()); // room for the next full batch: keep holding
            }
            // Taken: what the send cannot take now the flusher sends once writable.
            if let Err(e) = self.flush_held(&mut held) {
                debug_assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                self.wake.notify_one();
            }
            return Ok(());
        }
        // Not joinable: what is held goes first (the driver retries this transmit if that
        // would block).
        self.flush_held(&mut held)?;
        if full && 2 * t.contents.len() <= capacity {
            held.route = Some(route);
            held.bytes.extend_from_slice(t.contents);
            self.wake.notify_one();
            return Ok(());
        }
        drop(held);
        self.send(route, t.contents)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Sends held batches once the driver that held them has yielded; ends with the socket.
async fn flusher(socket: Weak<Coalescing>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        // The driver that held a batch may be about to add to it (it yields every twenty
        // datagrams): let it run first.
        tokio::task::yield_now().await;
        let Some(s) = socket.upgrade() else { return };
        let mut poller: Option<Pin<Box<dyn UdpPoller>>> = None;
        loop {
            match s.flush() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let p = poller.get_or_insert_with(|| s.inner.clone().create_io_poller());
                    if poll_fn(|cx| p.as_mut().poll_writable(cx)).await.is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    const SEG: usize = 1_452;

    /// One send: destination, segment size, bytes.
    type Sent = (SocketAddr, Option<usize>, Vec<u8>);

    /// A socket that records what it is asked to send; `block` makes the next send would-block.
    #[derive(Debug, Default)]
    struct Recorder {
        sent: Mutex<Vec<Sent>>,
        block: AtomicBool,
    }

    #[derive(Debug)]
    struct Writable;

    impl UdpPoller for Writable {
        fn poll_writable(self: Pin<&mut Self>, _: &mut Context) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncUdpSocket for Recorder {
        fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
            Box::pin(Writable)
        }
        fn try_send(&self, t: &Transmit) -> io::Result<()> {
            if self.block.swap(false, Ordering::SeqCst) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut sent = self.sent.lock().unwrap();
            sent.push((t.destination, t.segment_size, t.contents.to_vec()));
            Ok(())
        }
        fn poll_recv(
            &self,
            _: &mut Context,
            _: &mut [IoSliceMut<'_>],
            _: &mut [RecvMeta],
        ) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok("127.0.0.1:1".parse().unwrap())
        }
        fn max_transmit_segments(&self) -> usize {
            64
        }
    }

    fn to(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    /// `n` datagrams of `SEG` bytes (the last `last` bytes long), each byte its datagram's
    /// number from `first`.
    fn batch(first: u8, n: usize, last: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let len = if i + 1 == n { last } else { SEG };
            v.extend(std::iter::repeat_n(first.wrapping_add(i as u8), len));
        }
        v
    }

    fn transmit(dest: SocketAddr, bytes: &[u8], segment: Option<usize>) -> Transmit<'_> {
        Transmit {
            destination: dest,
            ecn: None,
            contents: bytes,
            segment_size: segment,
            src_ip: None,
        }
    }

    fn pair() -> (Arc<Recorder>, Arc<Coalescing>) {
        let r = Arc::new(Recorder::default());
        let c = Coalescing::new(r.clone());
        (r, c)
    }

    #[tokio::test]
    async fn full_batches_to_one_peer_leave_in_one_send_in_order() {
        let (r, c) = pair();
        let batches: Vec<Vec<u8>> = (0..4).map(|i| batch(i * 10, 10, SEG)).collect();
        for b in &batches {
            c.try_send(&transmit(to(1), b, Some(SEG))).unwrap();
        }
        let sent = r.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1, "forty datagrams, one send: {}", sent.len());
        assert_eq!(sent[0].1, Some(SEG));
        assert_eq!(
            sent[0].2,
            batches.concat(),
            "the bytes in the order handed over"
        );
        assert_eq!(c.stats().sends.load(Ordering::Relaxed), 1);
        assert_eq!(c.stats().datagrams.load(Ordering::Relaxed), 40);
    }

    #[tokio::test]
    async fn a_short_batch_ends_the_held_one_and_leaves_with_it() {
        let (r, c) = pair();
        let full = batch(0, 10, SEG);
        let short = batch(10, 3, 700);
        c.try_send(&transmit(to(1), &full, Some(SEG))).unwrap();
        assert!(r.sent.lock().unwrap().is_empty(), "held");
        c.try_send(&transmit(to(1), &short, Some(SEG))).unwrap();
        let sent = r.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].2, [full, short].concat());
    }

    #[tokio::test]
    async fn small_datagrams_are_never_held_and_never_pass_the_held_batch() {
        let (r, c) = pair();
        let ack = vec![7u8; 60];
        c.try_send(&transmit(to(2), &ack, None)).unwrap();
        assert_eq!(
            r.sent.lock().unwrap().len(),
            1,
            "a single datagram leaves at once"
        );
        let full = batch(0, 10, SEG);
        c.try_send(&transmit(to(1), &full, Some(SEG))).unwrap();
        c.try_send(&transmit(to(2), &ack, None)).unwrap();
        let sent = r.sent.lock().unwrap().clone();
        assert_eq!(
            sent.len(),
            3,
            "the held batch first, then the other peer's datagram"
        );
        assert_eq!((sent[1].0, &sent[1].2), (to(1), &full));
        assert_eq!((sent[2].0, sent[2].1), (to(2), None));
    }

    #[tokio::test]
    async fn a_held_batch_alone_is_sent_by_the_flusher() {
        let (r, c) = pair();
        let full = batch(0, 10, SEG);
        c.try_send(&transmit(to(1), &full, Some(SEG))).unwrap();
        for _ in 0..100 {
            if !r.sent.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(
            r.sent.lock().unwrap().clone(),
            vec![(to(1), Some(SEG), full)]
        );
    }

    #[tokio::test]
    async fn a_send_that_would_block_keeps_what_is_held_and_refuses_what_is_new() {
        let (r, c) = pair();
        let full = batch(0, 10, SEG);
        c.try_send(&transmit(to(1), &full, Some(SEG))).unwrap();
        r.block.store(true, Ordering::SeqCst);
        let other = vec![1u8; 100];
        let e = c.try_send(&transmit(to(2), &other, None)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "the driver retries it");
        assert!(r.sent.lock().unwrap().is_empty());
        c.try_send(&transmit(to(2), &other, None)).unwrap();
        let sent = r.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].2, full, "nothing lost, nothing reordered");
        assert_eq!(sent[1].2, other);
    }
}
