//! [`UcxTransport`]: blocks over UCX (`ucx` feature), through the in-tree `ucx-sys` bindings to
//! the system's libucx; on TCP by default (`UCX_TLS=tcp`, runs anywhere, loopback included),
//! on InfiniBand / RoCE with `ucx.tls = "rc"` where the fabric has it. Two fetch modes:
//! `stream` (the default: the server sends the block) and `get` (the server leases it and the
//! client reads it one-sided).
//!
//! Same semantics as [`crate::QuicTransport`]: the same [`crate::frame`] header, the same
//! [`BlockSource`], the same counters, typed errors, bounds and timeouts, and the same
//! conformance suite. What differs is below the frame:
//!
//! - **Progress thread.** UCX objects are not thread-safe in single-thread mode, so one
//!   dedicated thread per transport owns the UCP context, worker, listener and endpoints
//!   (`progress`). The async side talks to it through a `mailbox` (a channel plus an
//!   eventfd); it sleeps in `poll` on the worker's event fd and that eventfd after
//!   `ucp_worker_arm`, so it never spins idle.
//! - **Protocol.** One UCP stream endpoint per peer, requests pipelined on it and answered in
//!   order (`proto`); the client reads each response header, then its payload in chunks of
//!   `ucx.recv_chunk_bytes`, `ucx.recv_chunks_posted` receives deep, pushing every completed
//!   chunk to the verifying [`BlockReceiver`] while the next is already posted (`client`);
//!   the server looks blocks up on tokio and sends the source's `Bytes` as they are
//!   (`server`).
//! - **Get mode** (`ucx.mode = "get"`, the one-sided read path, the shape of an RDMA READ).
//!   The client sends `FetchRma`; the server maps the block (`mapped`: in place with
//!   `ucp_mem_map`, or, with `ucx.stage_leases`, copied into a reused region UCX allocated in
//!   shared memory), packs its rkey and answers `Lease` with a bounded descriptor (block
//!   length, address, rkey, the server worker's address; [`crate::lease`]); it holds the
//!   lease until the client's `Release`, the endpoint's end or `fetch_timeout_ms`, at most
//!   `ucx.leases_per_connection_max` per endpoint (counted: `leases_*`). The client connects
//!   a read endpoint to that worker address (once per connection), unpacks the rkey (kept
//!   unpacked per connection: staged regions repeat) and reads the block straight into the
//!   verifying receiver's own destination buffer, lent to it: with `ucp_get_nbx` in chunks of
//!   `ucx.recv_chunk_bytes`, `ucx.recv_chunks_posted` ahead, each chunk hashed in order as it
//!   lands while later gets are in flight; or, where UCX maps the leased memory into this
//!   process (`ucp_rkey_ptr`, shared memory), by copying it out of the mapping: a block of
//!   1 MiB and up by two threads, the progress thread and one scoped helper, each copying its
//!   part of the blake3 tree piece by piece (256 KiB) and hashing each piece right after its
//!   copy, the two parts' chaining values merged into the same keyed id as one pass
//!   (`kvfabric_store::hash_parallel::fill_and_verify_two_threads`); a smaller block, or no
//!   helper thread, chunk by chunk on the progress thread, each chunk hashed right after its
//!   copy (`rma`, `client::read`). Only a full match becomes a block; then the client sends
//!   `Release`. What this is on each fabric: **across hosts on InfiniBand/RoCE**
//!   with `tls = "rc"` the gets are RDMA READs of the block mapped in place, no copy on the
//!   server (not run here: no RDMA device); **on one host** with `tls = "sm,tcp"` and
//!   `stage_leases` the server copies the block once into UCX shared memory and the reader
//!   copies it out once — no NIC, no network, so comparing it with TCP on loopback is a
//!   same-host comparison; **over `tcp`** UCX emulates the get with messages. UCX 1.13's CMA
//!   transport (`process_vm_readv`) does not serve user gets (measured: `UCX_TLS=cma,tcp`
//!   gets run at TCP-emulation speed), and UCX offers shared memory only to endpoints
//!   without peer error handling and made from a worker address, hence the separate read
//!   endpoint (a dead server is noticed on the stream endpoint, whose end force-closes it).
//! - **Memory safety at the FFI boundary.** Every buffer UCX may touch is owned by its
//!   operation's heap context until UCX's callback hands it back (`ops`); a fetch that times
//!   out (or is dropped) closes its endpoint (responses are FIFO: one cannot be skipped),
//!   which cancels the receives, whose buffers then come back and are dropped — never freed
//!   under UCX. Other fetches on that endpoint fail with `ConnectionLost`.
//! - **Ordering at wire-up.** UCX 1.13 over TCP was seen delivering two stream sends posted
//!   while a client-server endpoint was still wiring up in the wrong order; an endpoint
//!   therefore holds its sends until its first one has completed (`endpoint`).
//! - **Failures.** UCX's error handler (peer error mode) reports a dead or reset peer at once;
//!   pending fetches end with `ConnectionLost` (the reason says how many payload bytes had
//!   arrived), or `Connect` if the endpoint never connected. A stream has no per-message end,
//!   so a sender that stops short and one that dies look the same: a lost connection, never a
//!   block.
//!
//! Limits, stated plainly:
//! - **No TLS.** UCX carries no authentication or encryption: use it only on a trusted fabric.
//!   Every block is still verified against its id, so a peer can refuse service but cannot
//!   make this side accept wrong bytes. The [`PeerAddr`] name is a label here, not checked.
//! - **An rkey opens memory.** In get mode a lease's rkey lets the peer read the mapped pages
//!   (with page granularity: neighbouring bytes on those pages too, for a lease mapped in
//!   place), and a staged lease's shared-memory region while it is attached; with CMA a peer
//!   can read the whole process. The client hands the peer's rkey and worker address to UCX
//!   as they come (their lengths bounded, their contents opaque): a malicious server could
//!   feed UCX garbage. Trusted fabrics only, again.
//! - **A lease can outlive its reader's interest.** If the client vanishes without `Release`,
//!   the block stays mapped (and a staged region taken) until the endpoint fails or
//!   `fetch_timeout_ms` passes.
//! - **UCX buffers what arrives unasked.** The transport bounds what it asks for (requests by
//!   slots, payloads by `max_frame_bytes`), but the UCP stream API keeps bytes that arrive
//!   before a receive is posted in UCX's own buffers; a peer that floods an endpoint costs
//!   memory until the endpoint closes. Another reason for a trusted fabric.
//! - **One thread does the receiving.** Chunks are copied and hashed on the progress thread,
//!   which also drives every other endpoint of the transport (in get mode too: a direct read
//!   of a 4.5 MB block holds the thread for its copy and hash, about 1.5 ms here, or for its
//!   half of them while the helper thread does the other half).
//!
//! Submodules: `context` (config and init), `worker` (worker, events, waker), `endpoint`,
//! `listener` and `ops` (UCP objects, operations, callbacks), `proto` (sans-IO protocol),
//! `receipt`, `mailbox`, `client` (with `client::read`, get mode), `server`, `mapped` (leased
//! blocks, staging), `rma` (rkeys, landing buffers, gets), `progress`, and [`raw`]
//! (misbehaving peers for the fault tests).

mod client;
mod context;
mod endpoint;
mod exit;
mod listener;
mod mailbox;
mod mapped;
mod ops;
mod progress;
mod proto;
pub mod raw;
mod receipt;
mod rma;
mod server;
mod sinks;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvfabric_store::{BlockId, NamespaceKey, VerifiedBlock};
use tokio::sync::{oneshot, Semaphore};

use crate::config::{TransportConfig, UcxMode};
use crate::counters::{CountersSnapshot, TransportCounters};
use crate::error::{bounded, TransportError};
use crate::frame::{push_header, FrameHeader, FrameKind};
use crate::peer::PeerAddr;
use crate::receive::{BlockReceiver, PayloadSink};
use crate::source::BlockSource;
use crate::transport::{in_order_bounded, Transport, TransportFuture};

use mailbox::{Command, Mailbox};
use receipt::Typed;

/// The UCX transport; cheap to clone (all clones share one progress thread).
#[derive(Clone)]
pub struct UcxTransport {
    inner: Arc<Inner>,
}

struct Inner {
    mailbox: Mailbox,
    local: PeerAddr,
    config: TransportConfig,
    counters: Arc<TransportCounters>,
    fetch_slots: Semaphore,
    next_token: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The thread releases everything on its own; nobody waits for it here (an exiting
        // process does: `exit`).
        let _ = self.mailbox.send(Command::Shutdown { done: None });
    }
}

/// Gives a fetch slot's count back however the fetch ends (including cancellation).
struct InFlight<'a>(&'a TransportCounters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_ended();
    }
}

/// Tells the progress thread a fetch gave up, unless it finished: a timed-out or dropped fetch
/// must not leave its connection receiving into its buffers.
struct Pending<'a> {
    mailbox: &'a Mailbox,
    token: u64,
    finished: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.mailbox.send(Command::Abandon { token: self.token });
        }
    }
}

impl UcxTransport {
    /// Starts the progress thread, listens on `listen` (port 0: any free port) and serves
    /// `source`; fetches use the same worker. `name` labels this node in [`PeerAddr`]s (UCX
    /// has no certificates to check it against). Must run inside a tokio runtime: the
    /// server's lookups run on it.
    pub async fn bind(
        config: TransportConfig,
        name: impl Into<String>,
        listen: SocketAddr,
        source: Arc<dyn BlockSource>,
    ) -> Result<UcxTransport, TransportError> {
        config.validate()?;
        let name = name.into();
        let counters = Arc::new(TransportCounters::default());
        let spec = progress::Spec {
            config: config.clone(),
            listen,
            source,
            runtime: tokio::runtime::Handle::current(),
            counters: counters.clone(),
        };
        let (mailbox, started) = progress::start(spec, &name)?;
        let started = started.await.map_err(|_| TransportError::Closed)??;
        tracing::info!(
            node = %name,
            addr = %started.addr,
            tls = %config.ucx.tls,
            "UCX transport listening"
        );
        Ok(UcxTransport {
            inner: Arc::new(Inner {
                mailbox,
                local: PeerAddr::new(name, started.addr),
                fetch_slots: Semaphore::new(config.fetches_in_flight_max),
                config,
                counters,
                next_token: AtomicU64::new(1),
            }),
        })
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local.addr
    }

    /// Fetches one block from `peer` into any [`PayloadSink`] (fed on the progress thread).
    /// [`Transport::fetch`] is this with the verifying [`BlockReceiver`].
    pub async fn fetch_into<S>(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
        sink: S,
    ) -> Result<S::Output, TransportError>
    where
        S: PayloadSink + 'static,
        S::Output: 'static,
    {
        let kind = match self.inner.config.ucx.mode {
            UcxMode::Stream => FrameKind::Fetch,
            UcxMode::Get => FrameKind::FetchRma,
        };
        let request = FrameHeader::request(kind, namespace, id);
        let result = self.exchange(peer, request, None, sink, "fetch").await;
        match &result {
            Ok(_) => self.inner.counters.fetches_ok(),
            Err(_) => self.inner.counters.fetches_failed(),
        }
        result
    }

    /// One request (with `body` after its header, if any) and its answer into `sink`, holding
    /// a transfer slot, bounded by `fetch_timeout_ms` (a timeout typed as `what`).
    async fn exchange<S>(
        &self,
        peer: &PeerAddr,
        request: FrameHeader,
        body: Option<bytes::Bytes>,
        sink: S,
        what: &'static str,
    ) -> Result<S::Output, TransportError>
    where
        S: PayloadSink + 'static,
        S::Output: 'static,
    {
        let inner = &self.inner;
        let attempt = async {
            let _permit = inner
                .fetch_slots
                .acquire()
                .await
                .map_err(|_| TransportError::Closed)?;
            inner.counters.fetch_started();
            let _in_flight = InFlight(&inner.counters);
            let (reply, outcome) = oneshot::channel();
            let token = inner.next_token.fetch_add(1, Ordering::Relaxed);
            let command = Command::Fetch {
                token,
                peer: peer.clone(),
                request,
                body,
                receipt: Box::new(Typed::new(sink, reply)),
            };
            inner.mailbox.send(command)?;
            let mut pending = Pending {
                mailbox: &inner.mailbox,
                token,
                finished: false,
            };
            // The thread always answers, or drops the receipt when it exits (then: closed).
            let result = outcome.await.map_err(|_| TransportError::Closed);
            pending.finished = true;
            result?
        };
        bounded(
            inner.config.fetch_timeout(),
            &inner.counters,
            peer,
            what,
            attempt,
        )
        .await
    }

    /// Fetches `ids` from `peer`, at most `fetches_in_flight_max` at a time (pipelined on the
    /// peer's one endpoint); results in the order of `ids`.
    pub async fn fetch_many_into<S, F>(
        &self,
        peer: &PeerAddr,
        namespace: NamespaceKey,
        ids: &[BlockId],
        make_sink: F,
    ) -> Vec<Result<S::Output, TransportError>>
    where
        S: PayloadSink + 'static,
        S::Output: 'static,
        F: Fn(BlockId) -> S,
    {
        let width = self.inner.config.fetches_in_flight_max;
        in_order_bounded(ids, width, |id| {
            let (this, peer, sink) = (self.clone(), peer.clone(), make_sink(id));
            async move { this.fetch_into(&peer, namespace, id, sink).await }
        })
        .await
    }
}

impl Transport for UcxTransport {
    fn fetch<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<VerifiedBlock, TransportError>> {
        Box::pin(self.fetch_into(peer, namespace, id, BlockReceiver::new(namespace, id)))
    }

    fn fetch_many<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        ids: &'a [BlockId],
    ) -> TransportFuture<'a, Vec<Result<VerifiedBlock, TransportError>>> {
        Box::pin(self.fetch_many_into(peer, namespace, ids, move |id| {
            BlockReceiver::new(namespace, id)
        }))
    }

    fn push<'a>(
        &'a self,
        peer: &'a PeerAddr,
        block: &'a VerifiedBlock,
    ) -> TransportFuture<'a, Result<(), TransportError>> {
        Box::pin(async move {
            let bytes = bytes::Bytes::copy_from_slice(block.bytes());
            let request = push_header(block.namespace(), block.id(), bytes.len() as u64);
            let r = self
                .exchange(peer, request, Some(bytes), sinks::Ack::default(), "push")
                .await;
            match &r {
                Ok(()) => self.inner.counters.pushes_ok(),
                Err(_) => self.inner.counters.pushes_failed(),
            }
            r
        })
    }

    fn probe<'a>(
        &'a self,
        peer: &'a PeerAddr,
        namespace: NamespaceKey,
        id: BlockId,
    ) -> TransportFuture<'a, Result<u64, TransportError>> {
        Box::pin(async move {
            let request = FrameHeader::request(FrameKind::Probe, namespace, id);
            let r = self
                .exchange(peer, request, None, sinks::Length::default(), "probe")
                .await;
            match &r {
                Ok(_)
                | Err(TransportError::NotFound { .. } | TransportError::Unavailable { .. }) => {
                    self.inner.counters.probes_ok()
                }
                Err(_) => self.inner.counters.probes_failed(),
            }
            r
        })
    }

    fn set_aside(&self, _peer: &PeerAddr, _since: std::time::Instant) {
        // A UCX connection ends with its first abandoned fetch (its responses come in order:
        // one cannot be skipped), so the attempt that fell silent ends it when it gives up.
    }

    fn local_peer(&self) -> PeerAddr {
        self.inner.local.clone()
    }

    fn counters(&self) -> CountersSnapshot {
        self.inner.counters.snapshot()
    }

    fn close(&self) -> TransportFuture<'_, ()> {
        Box::pin(async move {
            self.inner.fetch_slots.close();
            let (done, closed) = oneshot::channel();
            if self
                .inner
                .mailbox
                .send(Command::Shutdown { done: Some(done) })
                .is_ok()
            {
                // Bounded: the thread gives up waiting on UCX after CLOSE_WAIT_MS_MAX.
                let wait = Duration::from_millis(2 * progress::CLOSE_WAIT_MS_MAX);
                let _ = tokio::time::timeout(wait, closed).await;
            }
        })
    }
}

/// `(major, minor, release)` of the libucx this process linked (for logs and the bench).
pub fn ucx_version() -> (u32, u32, u32) {
    let (mut major, mut minor, mut release) = (0u32, 0u32, 0u32);
    // SAFETY: writes three integers through valid pointers; no other precondition.
    unsafe { ucx_sys::ucp_get_version(&mut major, &mut minor, &mut release) };
    (major, minor, release)
}
