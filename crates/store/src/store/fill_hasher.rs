//! The hashing thread of a large canonical put. [`super::Filling`] copies each piece of the
//! body into its reservation on the caller's thread and hands every span it has written to
//! this thread, which hashes it while the caller receives and copies the next piece: a put
//! then costs about its receive time, not its receive time plus its hash (one stream's blake3
//! runs on one core, and an HTTP body arrives on one worker).
//!
//! The thread reads only spans the filling has finished writing (each handed over through the
//! channel, which orders the writes before the reads) and the filling writes only past them;
//! the filling joins the thread before its reservation can be sealed, cancelled or reused.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::id::IdStream;
use crate::tier::host_region::RegionBuf;

/// Fewest cores on which [`super::Reservation::fill`] hashes a large put on a thread of its
/// own. Measured with `kvfabric bench node`: on 16 cores one client's put went from 0.59–0.69
/// to 0.73–0.89 × the bare HTTP server's; on 2 cores (the client on the same machine) from
/// 0.83–0.93 to 0.71–0.81, the hashing thread taking the core the receive needs.
pub(crate) const PIPELINE_MIN_CORES: usize = 4;

/// Whether this machine has the cores for a put's hashing thread ([`PIPELINE_MIN_CORES`]).
pub(crate) fn cores_to_spare() -> bool {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        >= PIPELINE_MIN_CORES
}

/// Bytes written before they are handed to the thread.
const SPAN_BYTES: usize = 256 << 10;

/// A block being hashed on a thread of its own, span by span as it is written.
pub(crate) struct FillHasher {
    /// Where the block's bytes written so far end (an offset into the block); closed to finish.
    tx: Option<mpsc::Sender<usize>>,
    thread: Option<JoinHandle<Box<dyn IdStream>>>,
    /// Bytes handed over so far.
    sent: usize,
}

impl FillHasher {
    /// Starts hashing the block at `offset` of `region` into `stream` (nothing fed yet), or
    /// `None` when no thread could be started (the stream is dropped; start another).
    pub(crate) fn start(
        region: Arc<RegionBuf>,
        offset: usize,
        stream: Box<dyn IdStream>,
    ) -> Option<FillHasher> {
        let (tx, rx) = mpsc::channel::<usize>();
        let thread = std::thread::Builder::new()
            .name("kvfabric-put-hash".into())
            .spawn(move || {
                let mut stream = stream;
                let mut hashed = 0;
                while let Ok(upto) = rx.recv() {
                    // SAFETY: the filling wrote [hashed, upto) of the block before sending
                    // `upto` and writes only past it from then on; the range stays allocated
                    // to the filling's reservation until this thread has been joined.
                    let bytes = unsafe { region.slice(offset + hashed, upto - hashed) };
                    stream.update(bytes);
                    hashed = upto;
                }
                stream
            })
            .ok()?;
        Some(FillHasher {
            tx: Some(tx),
            thread: Some(thread),
            sent: 0,
        })
    }

    /// The block is written up to `upto`: handed to the thread once a span has gathered.
    pub(crate) fn written(&mut self, upto: usize) {
        if upto - self.sent >= SPAN_BYTES {
            self.send(upto);
        }
    }

    /// Hands over everything up to `upto` and waits for the stream, every byte of it fed.
    pub(crate) fn finish(mut self, upto: usize) -> Box<dyn IdStream> {
        if upto > self.sent {
            self.send(upto);
        }
        self.tx = None;
        self.thread
            .take()
            .expect("joined once")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    fn send(&mut self, upto: usize) {
        if let Some(tx) = &self.tx {
            // A thread that is gone panicked; `finish` or the drop reports it.
            let _ = tx.send(upto);
        }
        self.sent = upto;
    }
}

impl Drop for FillHasher {
    /// Stops the thread and waits for it: nothing reads the reservation once the filling
    /// gives it up.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
