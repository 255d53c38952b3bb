//! [`Receipt`]: a fetch's [`PayloadSink`] and its reply channel, with the sink's type erased so
//! that the (non-generic) progress thread can feed it.
//!
//! The sink runs on the progress thread: each completed chunk is pushed (copied once into the
//! destination buffer and hashed there, in cache) while the next chunk's receive is already
//! posted, and `finish` (the final hash and the id check) runs there too. Only the outcome —
//! a verified block or an error — crosses back to the fetching task.

use std::convert::Infallible;

use kvfabric_store::hash_parallel::Fill;
use kvfabric_store::BlockId;
use tokio::sync::oneshot;

use crate::counters::TransportCounters;
use crate::error::TransportError;
use crate::peer::PeerAddr;
use crate::receive::{PayloadSink, ReceiveError};

/// A pending fetch's destination, as the progress thread sees it.
pub(crate) trait Receipt: Send {
    /// The payload's announced length (checked against `max_frame_bytes`).
    fn begin(&mut self, length: u64);
    /// A chunk of payload, in order.
    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError>;
    /// One-sided reads: the sink's destination buffer, lent ([`PayloadSink::lend`]).
    fn lend(&mut self) -> Vec<u8>;
    /// One-sided reads: bytes landed in place, in order ([`PayloadSink::landed`]).
    fn landed(&mut self, bytes: &[u8]) -> Result<(), ReceiveError>;
    /// One-sided reads: the lent buffer back, full ([`PayloadSink::restore`]).
    fn restore(&mut self, buf: Vec<u8>);
    /// One-sided reads of a mapped block: the whole block filled at once
    /// ([`PayloadSink::fill_whole`]); `false` if the sink does not take it that way.
    ///
    /// # Safety
    /// `fill` must write every byte of the piece it is given.
    unsafe fn fill_whole(&mut self, fill: &Fill<'_, Infallible>) -> bool;
    /// Every byte arrived: finish the sink (verify) and deliver the outcome. A hash mismatch is
    /// counted in `verify_failures`.
    fn finish(self: Box<Self>, peer: &PeerAddr, id: BlockId, counters: &TransportCounters);
    /// The fetch failed; deliver `error`.
    fn fail(self: Box<Self>, error: TransportError);
}

/// The receipt of a fetch into sink `S`.
pub(crate) struct Typed<S: PayloadSink> {
    sink: S,
    reply: oneshot::Sender<Result<S::Output, TransportError>>,
}

impl<S: PayloadSink> Typed<S> {
    /// A receipt feeding `sink`, answering on `reply`.
    pub(crate) fn new(
        sink: S,
        reply: oneshot::Sender<Result<S::Output, TransportError>>,
    ) -> Typed<S> {
        Typed { sink, reply }
    }
}

/// A receive error as a transport error about `peer` and `id`.
pub(crate) fn receive_error(peer: &PeerAddr, id: BlockId, e: ReceiveError) -> TransportError {
    match e {
        ReceiveError::HashMismatch { expected, found } => TransportError::VerifyFailed {
            peer: peer.clone(),
            expected,
            found,
        },
        ReceiveError::Truncated { expected, found } => TransportError::Truncated {
            peer: peer.clone(),
            id,
            expected,
            found,
        },
        ReceiveError::Overrun { expected, found } => TransportError::Overrun {
            peer: peer.clone(),
            id,
            expected,
            found,
        },
    }
}

impl<S: PayloadSink> Receipt for Typed<S> {
    fn begin(&mut self, length: u64) {
        self.sink.begin(length);
    }

    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        self.sink.push(chunk)
    }

    fn lend(&mut self) -> Vec<u8> {
        self.sink.lend()
    }

    fn landed(&mut self, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.sink.landed(bytes)
    }

    fn restore(&mut self, buf: Vec<u8>) {
        self.sink.restore(buf)
    }

    unsafe fn fill_whole(&mut self, fill: &Fill<'_, Infallible>) -> bool {
        // SAFETY: forwarded from this method's contract on `fill`.
        unsafe { self.sink.fill_whole(fill) }
    }

    fn finish(self: Box<Self>, peer: &PeerAddr, id: BlockId, counters: &TransportCounters) {
        let Typed { sink, reply } = *self;
        let outcome = sink.finish().map_err(|e| {
            if matches!(e, ReceiveError::HashMismatch { .. }) {
                counters.verify_failures();
            }
            receive_error(peer, id, e)
        });
        // The fetch may have timed out meanwhile; then nobody is waiting and that is fine.
        let _ = reply.send(outcome);
    }

    fn fail(self: Box<Self>, error: TransportError) {
        let _ = self.reply.send(Err(error));
    }
}
