//! A request's head and a small body in one write.
//!
//! ureq hands its transport the request head, then the body, in two `transmit_output` calls,
//! and a TCP socket with `TCP_NODELAY` (ureq's default) sends each as a segment of its own:
//! `kvfabric bench directory` saw every one-record claim leave its client as a 206-byte head and
//! a 162-byte body, so the node took two segments (and often two wake-ups) for one request.
//! [`JoinWrites`] wraps the connection: output is held back while it stays under
//! [`JOIN_BYTES_MAX`] and goes out in one write as soon as the client waits for an answer (or
//! checks a pooled connection), so a small request is one segment. Larger output (a block's
//! body) goes out as ureq hands it over; at most the first piece of it is copied once.
//!
//! Nothing is ever left unsent behind a read: every path that waits for input, or that asks
//! whether a pooled connection is still usable, sends what is held first, and a connection
//! that still holds output is not reused.

use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};

/// Most output held back to be joined with what follows (a request head and a small JSON
/// body fit; a block's body does not).
pub const JOIN_BYTES_MAX: usize = 16 * 1024;

/// Wraps each connection of the chain before it in a [`Joined`].
#[derive(Debug, Default, Clone, Copy)]
pub struct JoinWrites;

impl<In: Transport> Connector<In> for JoinWrites {
    type Out = Joined<In>;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        Ok(chained.map(|inner| Joined {
            inner,
            held: Vec::new(),
        }))
    }
}

/// A connection whose small writes are joined (see the module docs).
#[derive(Debug)]
pub struct Joined<T> {
    inner: T,
    /// Output handed over by ureq and not yet written.
    held: Vec<u8>,
}

impl<T: Transport> Joined<T> {
    /// Bytes handed over and not yet written.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Writes everything held, through the inner connection's output buffer.
    fn send_held(&mut self, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let mut from = 0;
        while from < self.held.len() {
            let out = self.inner.buffers().output();
            let n = out.len().min(self.held.len() - from);
            if n == 0 {
                return Err(ureq::Error::Io(std::io::Error::other(
                    "the connection's output buffer has no room",
                )));
            }
            out[..n].copy_from_slice(&self.held[from..from + n]);
            self.inner.transmit_output(n, timeout)?;
            from += n;
        }
        self.held.clear();
        Ok(())
    }
}

impl<T: Transport> Transport for Joined<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        if self.held.is_empty() && amount > JOIN_BYTES_MAX {
            return self.inner.transmit_output(amount, timeout);
        }
        let out = &self.inner.buffers().output()[..amount];
        self.held.extend_from_slice(out);
        if self.held.len() > JOIN_BYTES_MAX {
            self.send_held(timeout)?;
        }
        Ok(())
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.send_held(timeout)?;
        self.inner.maybe_await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.send_held(timeout)?;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.held.is_empty() && self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

#[cfg(test)]
mod tests {
    use ureq::unversioned::transport::LazyBuffers;

    use super::*;

    /// An inner connection that records each write it is asked for.
    #[derive(Debug)]
    struct Recorder {
        buffers: LazyBuffers,
        writes: Vec<Vec<u8>>,
    }

    impl Transport for Recorder {
        fn buffers(&mut self) -> &mut dyn Buffers {
            &mut self.buffers
        }
        fn transmit_output(&mut self, amount: usize, _: NextTimeout) -> Result<(), ureq::Error> {
            let out = self.buffers.output()[..amount].to_vec();
            self.writes.push(out);
            Ok(())
        }
        fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
            Ok(true)
        }
        fn is_open(&mut self) -> bool {
            true
        }
    }

    const OUTPUT_BYTES: usize = 64 * 1024;

    fn joined() -> Joined<Recorder> {
        Joined {
            inner: Recorder {
                buffers: LazyBuffers::new(1024, OUTPUT_BYTES),
                writes: Vec::new(),
            },
            held: Vec::new(),
        }
    }

    /// Hands `bytes` over as ureq does: written into the output buffer, then transmitted.
    fn hand_over(j: &mut Joined<Recorder>, bytes: &[u8]) {
        j.buffers().output()[..bytes.len()].copy_from_slice(bytes);
        j.transmit_output(bytes.len(), NextTimeout::default())
            .unwrap();
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn a_small_request_goes_out_in_one_write_once_the_answer_is_awaited() {
        let mut j = joined();
        let (head, body) = (bytes(206, 1), bytes(162, 2));
        hand_over(&mut j, &head);
        hand_over(&mut j, &body);
        assert!(
            j.inner.writes.is_empty(),
            "held until the answer is awaited"
        );
        assert_eq!(j.held(), 368);
        assert!(!j.is_open(), "a connection holding output is not reused");
        j.await_input(NextTimeout::default()).unwrap();
        assert_eq!(j.inner.writes, vec![[head, body].concat()]);
        assert_eq!(j.held(), 0);
        assert!(j.is_open());
    }

    #[test]
    fn every_wait_for_input_sends_what_is_held_first() {
        let mut j = joined();
        hand_over(&mut j, b"GET / HTTP/1.1\r\n\r\n");
        j.maybe_await_input(NextTimeout::default()).unwrap();
        assert_eq!(j.inner.writes, vec![b"GET / HTTP/1.1\r\n\r\n".to_vec()]);
    }

    #[test]
    fn a_large_body_goes_out_as_handed_over_in_order() {
        let mut j = joined();
        let head = bytes(300, 3);
        let chunks = [
            bytes(OUTPUT_BYTES, 4),
            bytes(OUTPUT_BYTES, 5),
            bytes(1000, 6),
        ];
        hand_over(&mut j, &head);
        for c in &chunks {
            hand_over(&mut j, c);
        }
        j.await_input(NextTimeout::default()).unwrap();
        let sent: Vec<u8> = j.inner.writes.concat();
        let want: Vec<u8> = [head.clone()]
            .iter()
            .chain(&chunks)
            .cloned()
            .collect::<Vec<_>>()
            .concat();
        assert_eq!(sent, want, "every byte, in order");
        // The head and the first chunk were joined (two writes: the output buffer's size
        // bounds one), the second chunk went as it came, the small tail was held and sent on
        // the wait.
        let sizes: Vec<usize> = j.inner.writes.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![OUTPUT_BYTES, 300, OUTPUT_BYTES, 1000]);
    }
}
