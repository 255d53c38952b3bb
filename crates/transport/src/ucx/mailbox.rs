//! [`Mailbox`]: how the async side (and the server's lookup tasks) talk to the progress
//! thread: a channel of [`Command`]s plus the [`Waker`] that interrupts its sleep.
//!
//! The channel is unbounded, but what is in it is bounded by its producers: fetches hold one
//! of `fetches_in_flight_max` slots while their command is queued, lookups are at most
//! `serve_streams_max` per server connection, and the rest (abandon, shutdown) are one per
//! fetch or per call.

use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::error::TransportError;
use crate::frame::FrameHeader;
use crate::peer::PeerAddr;
use crate::source::{Accepted, Holding, SourceLookup};
use crate::ucx::receipt::Receipt;
use crate::ucx::worker::{ConnId, Waker};

/// What the progress thread is asked to do.
pub(crate) enum Command {
    /// Send `request` to `peer` and deliver the response through `receipt`.
    Fetch {
        /// Names the fetch for [`Command::Abandon`].
        token: u64,
        /// Whom to ask.
        peer: PeerAddr,
        /// The request header.
        request: FrameHeader,
        /// What follows the header (a pushed block's bytes), if anything.
        body: Option<bytes::Bytes>,
        /// Where the payload goes and the outcome is reported.
        receipt: Box<dyn Receipt>,
    },
    /// The fetch `token` timed out or was dropped: close its connection (UCX must stop
    /// writing into its buffers; FIFO responses cannot skip one).
    Abandon {
        /// The fetch.
        token: u64,
    },
    /// A server lookup finished (`None`: it ran past `fetch_timeout_ms`).
    LookupDone {
        /// The server connection that asked.
        conn: ConnId,
        /// The request's sequence number on it.
        seq: u64,
        /// The request being answered.
        request: FrameHeader,
        /// What the source said (`None`: past `fetch_timeout_ms`).
        answer: Option<Answer>,
    },
    /// Stop: close every endpoint, fail pending fetches, then tell `done` (if any).
    Shutdown {
        /// Told when the thread has released everything.
        done: Option<oneshot::Sender<()>>,
    },
}

/// What a server's source answered, by request kind.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A fetch's lookup.
    Lookup(SourceLookup),
    /// A probe's.
    Holding(Holding),
    /// A push's (its bytes verified): `None` when they did not hash to the id.
    Accepted(Option<Accepted>),
}

/// The sending side of the progress thread's command channel; cheap to clone.
#[derive(Clone)]
pub(crate) struct Mailbox {
    tx: mpsc::Sender<Command>,
    waker: Arc<Waker>,
}

impl Mailbox {
    /// A mailbox and the receiving end the progress thread keeps.
    pub(crate) fn new(waker: Arc<Waker>) -> (Mailbox, mpsc::Receiver<Command>) {
        let (tx, rx) = mpsc::channel();
        (Mailbox { tx, waker }, rx)
    }

    /// Queues `command` and wakes the thread; [`TransportError::Closed`] if the thread has
    /// exited (the command, and any reply channel in it, is dropped).
    pub(crate) fn send(&self, command: Command) -> Result<(), TransportError> {
        self.tx.send(command).map_err(|_| TransportError::Closed)?;
        self.waker.wake();
        Ok(())
    }
}
