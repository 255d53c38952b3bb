//! The UCX wire protocol as pure state machines (sans-IO): no UCX, no clock.
//!
//! On one UCP stream endpoint the client writes requests back to back (a [`FrameHeader`] of
//! kind `Fetch` each, at most `fetches_in_flight_max` outstanding) and the server answers them
//! in the same order (FIFO pipelining): a response header, then for `Block` exactly `length`
//! payload bytes. There is no end-of-stream per message, so lengths frame everything: a
//! server reads requests as fixed-size headers ([`RequestReader`]); a client reads a response
//! header, then the payload in chunks ([`PayloadPlan`]). The server's lookups finish in any
//! order, and [`InOrder`] releases their responses in request order.

use std::collections::VecDeque;
use std::time::Instant;

use kvfabric_store::VerifiedBlock;

use crate::config::FRAME_BYTES_CEILING;
use crate::frame::{decode_any_request, FrameError, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::receive::{BlockReceiver, PayloadSink, ReceiveError};

/// Largest receive posted for a pushed block's bytes.
const PUSH_RECV_BYTES_MAX: usize = 512 * 1024;

/// One request the stream completed.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A request of a header only (`Fetch`, `FetchRma`, `Release`, `Probe`).
    Request(FrameHeader),
    /// A `Push` and its bytes, received through the verifying receiver: the block, or why
    /// its bytes do not hash to the id.
    Pushed(FrameHeader, Result<VerifiedBlock, ReceiveError>),
}

impl Incoming {
    /// The request's header.
    pub(crate) fn header(&self) -> &FrameHeader {
        match self {
            Incoming::Request(h) | Incoming::Pushed(h, _) => h,
        }
    }
}

/// A push whose bytes are arriving.
struct Body {
    header: FrameHeader,
    receiver: BlockReceiver,
    left: u64,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("header", &self.header)
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

/// Server side: cuts the request byte stream into checked requests — headers, and after a
/// `Push` header its `length` bytes, hashed as they land — and remembers since when the
/// request still incomplete has been arriving (the request timeout runs from its first byte,
/// whatever completed before it).
#[derive(Debug)]
pub(crate) struct RequestReader {
    partial: [u8; FRAME_HEADER_LEN],
    filled: usize,
    partial_since: Option<Instant>,
    body: Option<Body>,
    max_frame_bytes: u64,
}

impl Default for RequestReader {
    fn default() -> RequestReader {
        RequestReader::new(FRAME_BYTES_CEILING)
    }
}

impl RequestReader {
    /// A reader taking pushed blocks of at most `max_frame_bytes`.
    pub(crate) fn new(max_frame_bytes: u64) -> RequestReader {
        RequestReader {
            partial: [0; FRAME_HEADER_LEN],
            filled: 0,
            partial_since: None,
            body: None,
            max_frame_bytes,
        }
    }

    /// Appends bytes received at `now`; every request they complete is checked and appended
    /// to `out`. The first bad header is a protocol violation (the endpoint is then closed).
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        now: Instant,
        out: &mut Vec<Incoming>,
    ) -> Result<(), FrameError> {
        while !bytes.is_empty() {
            if let Some(body) = &mut self.body {
                let take = (body.left.min(bytes.len() as u64)) as usize;
                // Within the announced length by construction: never an overrun.
                let _ = body.receiver.push(&bytes[..take]);
                body.left -= take as u64;
                bytes = &bytes[take..];
                if body.left == 0 {
                    let body = self.body.take().expect("a body in progress");
                    self.partial_since = None;
                    out.push(Incoming::Pushed(body.header, body.receiver.finish()));
                }
                continue;
            }
            if self.filled == 0 {
                self.partial_since = Some(now);
            }
            let take = (FRAME_HEADER_LEN - self.filled).min(bytes.len());
            self.partial[self.filled..self.filled + take].copy_from_slice(&bytes[..take]);
            self.filled += take;
            bytes = &bytes[take..];
            if self.filled == FRAME_HEADER_LEN {
                self.filled = 0;
                let header = decode_any_request(&self.partial, self.max_frame_bytes)?;
                if header.kind == FrameKind::Push && header.length > 0 {
                    let mut receiver = BlockReceiver::new(header.namespace, header.id);
                    receiver.begin(header.length);
                    self.body = Some(Body {
                        header,
                        receiver,
                        left: header.length,
                    });
                    continue; // Still the same request: partial_since stays.
                }
                self.partial_since = None;
                if header.kind == FrameKind::Push {
                    let mut receiver = BlockReceiver::new(header.namespace, header.id);
                    receiver.begin(0);
                    out.push(Incoming::Pushed(header, receiver.finish()));
                } else {
                    out.push(Incoming::Request(header));
                }
            }
        }
        Ok(())
    }

    /// When the first byte of the header still incomplete arrived, if one is.
    pub(crate) fn partial_since(&self) -> Option<Instant> {
        self.partial_since
    }

    /// Whether part of a header has arrived.
    #[cfg(test)]
    fn has_partial(&self) -> bool {
        self.filled > 0 || self.body.is_some()
    }

    /// How many bytes to receive next so that at most `slots` more requests can complete:
    /// the server never reads a request it has no slot for (`serve_streams_max`), and what
    /// it does not read stays with the sender (back-pressure).
    pub(crate) fn room(&self, slots: usize) -> usize {
        if let Some(body) = &self.body {
            // A push's bytes: what is left of them, a bounded receive at a time.
            return (body.left as usize).min(PUSH_RECV_BYTES_MAX);
        }
        (slots * FRAME_HEADER_LEN).saturating_sub(self.filled)
    }
}

/// Client side: the chunked receives of one payload of `length` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PayloadPlan {
    length: u64,
    chunk: u64,
    posted: u64,
    received: u64,
}

impl PayloadPlan {
    /// A plan for `length` bytes in receives of at most `chunk` bytes (`chunk` > 0).
    pub(crate) fn new(length: u64, chunk: usize) -> PayloadPlan {
        PayloadPlan {
            length,
            chunk: chunk.max(1) as u64,
            posted: 0,
            received: 0,
        }
    }

    /// The size of the next receive to post, if any bytes are not yet asked for.
    pub(crate) fn next_post(&mut self) -> Option<usize> {
        let left = self.length - self.posted;
        if left == 0 {
            return None;
        }
        let n = left.min(self.chunk);
        self.posted += n;
        Some(n as usize)
    }

    /// A posted receive completed with `n` bytes (exactly what it asked for: WAITALL).
    pub(crate) fn received(&mut self, n: usize) {
        self.received += n as u64;
        debug_assert!(self.received <= self.posted);
    }

    /// Payload bytes received so far.
    pub(crate) fn received_bytes(&self) -> u64 {
        self.received
    }

    /// The announced length.
    pub(crate) fn length(&self) -> u64 {
        self.length
    }

    /// Whether every byte arrived.
    pub(crate) fn is_complete(&self) -> bool {
        self.received == self.length
    }
}

/// Server side: items that become ready in any order, released in the order they were
/// queued (each request's response goes out after every earlier one's).
#[derive(Debug)]
pub(crate) struct InOrder<T> {
    next_seq: u64,
    queue: VecDeque<(u64, Option<T>)>,
}

impl<T> Default for InOrder<T> {
    fn default() -> InOrder<T> {
        InOrder {
            next_seq: 0,
            queue: VecDeque::new(),
        }
    }
}

impl<T> InOrder<T> {
    /// Queues a not-yet-ready item; returns its sequence number.
    pub(crate) fn push(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back((seq, None));
        seq
    }

    /// Item `seq` is ready; false if it is not queued (already released or never queued).
    pub(crate) fn fill(&mut self, seq: u64, item: T) -> bool {
        match self.queue.iter_mut().find(|(s, _)| *s == seq) {
            Some((_, slot @ None)) => {
                *slot = Some(item);
                true
            }
            _ => false,
        }
    }

    /// The oldest item, if it is ready.
    pub(crate) fn pop_ready(&mut self) -> Option<(u64, T)> {
        if !matches!(self.queue.front(), Some((_, Some(_)))) {
            return None;
        }
        let (seq, item) = self.queue.pop_front()?;
        item.map(|i| (seq, i))
    }

    /// Items queued and not yet released.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameKind;
    use kvfabric_store::{BlockId, NamespaceKey};

    fn t0() -> Instant {
        Instant::now()
    }

    fn request(i: u8) -> FrameHeader {
        FrameHeader::fetch(NamespaceKey::derive("p"), BlockId([i; 32]))
    }

    #[test]
    fn requests_split_anywhere_decode_the_same() {
        let mut stream = Vec::new();
        for i in 0..5 {
            stream.extend_from_slice(&request(i).encode());
        }
        for step in [
            1,
            7,
            FRAME_HEADER_LEN - 1,
            FRAME_HEADER_LEN,
            100,
            stream.len(),
        ] {
            let (mut r, mut out) = (RequestReader::default(), Vec::new());
            for piece in stream.chunks(step) {
                r.feed(piece, t0(), &mut out).expect("valid requests");
            }
            assert_eq!(
                out.iter().map(|i| *i.header()).collect::<Vec<_>>(),
                (0..5).map(request).collect::<Vec<_>>(),
                "step {step}"
            );
            assert!(!r.has_partial());
        }
    }

    #[test]
    fn a_push_and_its_bytes_split_anywhere_verify_between_other_requests() {
        use crate::conformance::sources::test_block;
        let ns = NamespaceKey::derive("p");
        let block = test_block(ns, 3000, 5);
        let mut lie = block.bytes().to_vec();
        lie[100] ^= 1;
        let push = crate::frame::push_header(ns, block.id(), block.bytes().len() as u64);
        let mut stream = request(1).encode().to_vec();
        stream.extend_from_slice(&push.encode());
        stream.extend_from_slice(block.bytes());
        stream.extend_from_slice(&push.encode());
        stream.extend_from_slice(&lie);
        stream.extend_from_slice(&request(2).encode());
        for step in [1, 50, 1000, stream.len()] {
            let (mut r, mut out) = (RequestReader::default(), Vec::new());
            for piece in stream.chunks(step) {
                r.feed(piece, t0(), &mut out).expect("valid requests");
                assert!(r.room(4) > 0);
            }
            assert_eq!(out.len(), 4, "step {step}");
            assert!(matches!(&out[1], Incoming::Pushed(_, Ok(b)) if b.bytes() == block.bytes()));
            assert!(matches!(
                &out[2],
                Incoming::Pushed(_, Err(ReceiveError::HashMismatch { .. }))
            ));
            assert_eq!(*out[3].header(), request(2));
            assert!(!r.has_partial());
        }
        let mut small = RequestReader::new(1000);
        let err = small
            .feed(&push.encode(), t0(), &mut Vec::new())
            .unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn a_bad_header_is_a_violation_after_the_good_ones() {
        let mut stream = request(1).encode().to_vec();
        let wrong = FrameHeader {
            kind: FrameKind::Block,
            ..request(2)
        };
        stream.extend_from_slice(&wrong.encode());
        let (mut r, mut out) = (RequestReader::default(), Vec::new());
        let err = r.feed(&stream, t0(), &mut out).unwrap_err();
        assert!(matches!(err, FrameError::UnexpectedKind { .. }), "{err}");
        assert_eq!(
            out.iter().map(|i| *i.header()).collect::<Vec<_>>(),
            vec![request(1)]
        );
        let err = RequestReader::default()
            .feed(&[0xAB; FRAME_HEADER_LEN], t0(), &mut out)
            .unwrap_err();
        assert!(matches!(err, FrameError::BadMagic { .. }), "{err}");
    }

    #[test]
    fn the_request_timeout_runs_from_the_incomplete_headers_first_byte() {
        use std::time::Duration;
        let (mut r, mut out) = (RequestReader::default(), Vec::new());
        let (a, b, c) = (
            request(1).encode(),
            request(2).encode(),
            request(3).encode(),
        );
        let t = Instant::now();
        let at = |ms| t + Duration::from_millis(ms);
        r.feed(&a[..30], at(0), &mut out).unwrap();
        assert_eq!(r.partial_since(), Some(at(0)));
        r.feed(&a[30..40], at(5), &mut out).unwrap();
        assert_eq!(r.partial_since(), Some(at(0)), "still the same header");
        // The rest of `a`, all of `b`, and part of `c`: the clock restarts at `c`.
        let mut more = a[40..].to_vec();
        more.extend_from_slice(&b);
        more.extend_from_slice(&c[..7]);
        r.feed(&more, at(9), &mut out).unwrap();
        assert_eq!(r.partial_since(), Some(at(9)));
        r.feed(&c[7..], at(12), &mut out).unwrap();
        assert_eq!(r.partial_since(), None);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn room_never_lets_more_requests_complete_than_slots() {
        let mut r = RequestReader::default();
        assert_eq!(r.room(2), 2 * FRAME_HEADER_LEN);
        r.feed(&request(1).encode()[..10], t0(), &mut Vec::new())
            .unwrap();
        assert!(r.has_partial());
        assert_eq!(r.room(1), FRAME_HEADER_LEN - 10);
        assert_eq!(r.room(0), 0);
    }

    #[test]
    fn a_plan_posts_chunks_that_add_up_to_the_length() {
        let mut p = PayloadPlan::new(10_000, 4096);
        let mut posts = Vec::new();
        while let Some(n) = p.next_post() {
            posts.push(n);
        }
        assert_eq!(posts, vec![4096, 4096, 1808]);
        for n in posts {
            assert!(!p.is_complete());
            p.received(n);
        }
        assert!(p.is_complete());
        assert_eq!((p.received_bytes(), p.length()), (10_000, 10_000));
        let mut empty = PayloadPlan::new(0, 4096);
        assert_eq!(empty.next_post(), None);
        assert!(empty.is_complete());
    }

    #[test]
    fn in_order_releases_only_the_oldest_ready_item() {
        let mut q = InOrder::default();
        let (a, b, c) = (q.push(), q.push(), q.push());
        assert!(q.fill(c, 'c'));
        assert!(q.fill(b, 'b'));
        assert_eq!(q.pop_ready(), None, "a is not ready, so nothing leaves");
        assert!(q.fill(a, 'a'));
        assert!(!q.fill(a, 'x'), "filled twice");
        assert_eq!(q.pop_ready(), Some((a, 'a')));
        assert_eq!(q.pop_ready(), Some((b, 'b')));
        assert_eq!(q.pop_ready(), Some((c, 'c')));
        assert_eq!(q.pop_ready(), None);
        assert!(!q.fill(a, 'y'), "already released");
        assert_eq!(q.len(), 0);
    }
}
