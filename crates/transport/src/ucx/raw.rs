//! Misbehaving UCX peers for the fault tests, in the manner of
//! [`crate::conformance::sources`]: a [`RawServer`] that answers each request with whatever
//! bytes a closure returns (garbage, a lie, half a block) and can die abruptly, and a
//! [`RawClient`] that sends arbitrary bytes and reports when the server closes on it. Each runs
//! its own UCP worker on its own thread; none is used by a production path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ucx_sys::{status_string, ucs_status_t};

use crate::config::TransportConfig;
use crate::error::TransportError;
use crate::frame::{FrameHeader, FRAME_HEADER_LEN};
use crate::peer::PeerAddr;
use crate::ucx::context::Context;
use crate::ucx::endpoint::Endpoint;
use crate::ucx::listener::Listener;
use crate::ucx::ops::Keep;
use crate::ucx::worker::{ConnId, ConnIds, Event, OpKind, Waker, Worker};

/// How long a raw peer's thread sleeps between looks at its control channel.
const RAW_POLL_MS: i32 = 5;
/// Bound on waiting for endpoint closes when a raw peer stops.
const RAW_CLOSE_WAIT_MS_MAX: u64 = 500;
/// Receive size of the raw client (it discards what it reads).
const RAW_RECV_BYTES: usize = 64 << 10;

/// What a [`RawServer`] answers to one request.
#[derive(Debug, Clone, Default)]
pub struct RawReply {
    /// Bytes sent back, as they are.
    pub bytes: Vec<u8>,
    /// Force-close the endpoint once they are sent.
    pub then_close: bool,
}

enum Control {
    Send(Vec<u8>),
    Stop,
}

/// A thread running a raw peer, stopped on [`RawThread::stop`] or drop.
struct RawThread {
    control: Sender<Control>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl RawThread {
    fn stop(&mut self) {
        let _ = self.control.send(Control::Stop);
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RawThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a thread that builds its state with `setup` (reporting the outcome) and then runs
/// `step` each turn until stopped.
fn spawn<S, T>(
    config: &TransportConfig,
    setup: impl FnOnce(&Worker) -> Result<(S, T), TransportError> + Send + 'static,
    mut on_event: impl FnMut(&Worker, &mut S, &mut ConnIds, Event) + Send + 'static,
    mut on_send: impl FnMut(&mut S, Vec<u8>) + Send + 'static,
) -> Result<(RawThread, T), TransportError>
where
    S: 'static,
    T: Send + 'static,
{
    config.validate()?;
    let config = config.clone();
    let waker = Arc::new(Waker::new()?);
    let (control, commands): (Sender<Control>, Receiver<Control>) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread_waker = waker.clone();
    let thread = std::thread::Builder::new()
        .name("ucx-raw-peer".into())
        .spawn(move || {
            let worker = match Context::new(&config).and_then(Worker::new) {
                Ok(w) => w,
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            let mut state = match setup(&worker) {
                Ok((state, ready)) => {
                    let _ = ready_tx.send(Ok(ready));
                    state
                }
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            let mut ids = ConnIds::default();
            'run: loop {
                thread_waker.reset();
                loop {
                    match commands.try_recv() {
                        Ok(Control::Send(bytes)) => on_send(&mut state, bytes),
                        Ok(Control::Stop) | Err(TryRecvError::Disconnected) => break 'run,
                        Err(TryRecvError::Empty) => break,
                    }
                }
                while worker.progress() {}
                for event in worker.take_events() {
                    if let Event::Sent {
                        op:
                            crate::ucx::worker::OpId {
                                kind: OpKind::Close,
                                ..
                            },
                        ..
                    } = event
                    {
                        worker.endpoint_closed();
                        continue;
                    }
                    on_event(&worker, &mut state, &mut ids, event);
                }
                let _ = worker.sleep(&thread_waker, RAW_POLL_MS);
            }
            // Dies: endpoints force-closed (the peer sees its connection fail), then the worker.
            drop(state);
            let deadline = Instant::now() + Duration::from_millis(RAW_CLOSE_WAIT_MS_MAX);
            while worker.endpoints() > 0 && Instant::now() < deadline {
                worker.progress();
                for event in worker.take_events() {
                    if matches!(event, Event::Sent { op, .. } if op.kind == OpKind::Close) {
                        worker.endpoint_closed();
                    }
                }
            }
        })
        .map_err(|e| TransportError::io("spawning a raw UCX peer", e))?;
    let ready = ready_rx
        .recv()
        .map_err(|_| TransportError::Closed)
        .and_then(|r| r);
    let raw = RawThread {
        control,
        waker,
        thread: Some(thread),
    };
    Ok((raw, ready?))
}

/// A server that answers every well-formed request header with `respond(request)`.
pub struct RawServer {
    addr: SocketAddr,
    replies_sent: Arc<AtomicU64>,
    thread: RawThread,
}

struct ServerState {
    /// Kept alive (listening) for the server's life; dropped before the worker.
    _listener: Listener,
    conns: HashMap<ConnId, (Endpoint, bool)>,
    respond: Box<dyn Fn(FrameHeader) -> RawReply + Send>,
    replies_sent: Arc<AtomicU64>,
}

impl RawServer {
    /// Listens on 127.0.0.1 (any port) with `config`'s UCX settings.
    pub fn start(
        config: &TransportConfig,
        respond: impl Fn(FrameHeader) -> RawReply + Send + 'static,
    ) -> Result<RawServer, TransportError> {
        let replies_sent = Arc::new(AtomicU64::new(0));
        let counter = replies_sent.clone();
        let setup = move |worker: &Worker| {
            let listener = Listener::bind(worker, SocketAddr::from(([127, 0, 0, 1], 0)))?;
            let addr = listener.local_addr();
            let state = ServerState {
                _listener: listener,
                conns: HashMap::new(),
                respond: Box::new(respond),
                replies_sent: counter,
            };
            Ok((state, addr))
        };
        let (thread, addr) = spawn(config, setup, server_event, |_, _| {})?;
        Ok(RawServer {
            addr,
            replies_sent,
            thread,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// It as a peer named `name`.
    pub fn peer(&self, name: &str) -> PeerAddr {
        PeerAddr::new(name, self.addr)
    }

    /// Replies whose bytes UCX finished sending.
    pub fn replies_sent(&self) -> u64 {
        self.replies_sent.load(Ordering::SeqCst)
    }

    /// Dies at once: every endpoint force-closed, the listener and the worker destroyed.
    pub fn kill(&mut self) {
        self.thread.stop();
    }
}

fn server_event(worker: &Worker, s: &mut ServerState, ids: &mut ConnIds, event: Event) {
    match event {
        Event::ConnRequest(request) => {
            let id = ids.next();
            match Endpoint::accept(worker, id, request) {
                Ok(ep) => {
                    ep.recv(OpKind::Raw, Vec::new(), FRAME_HEADER_LEN, true);
                    s.conns.insert(id, (ep, false));
                }
                Err(e) => tracing::warn!(error = %e, "raw server: accept failed"),
            }
        }
        Event::Received {
            op,
            status,
            buf,
            length,
        } => {
            let Some((ep, close_after)) = s.conns.get_mut(&op.conn) else {
                return;
            };
            if status != ucs_status_t::UCS_OK {
                s.conns.remove(&op.conn);
                return;
            }
            let Ok(request) = FrameHeader::decode(&buf[..length], u64::MAX) else {
                s.conns.remove(&op.conn);
                return;
            };
            let reply = (s.respond)(request);
            *close_after = reply.then_close;
            if !reply.bytes.is_empty() {
                ep.send(OpKind::Raw, Keep::Buf(reply.bytes));
            }
            ep.recv(OpKind::Raw, buf, FRAME_HEADER_LEN, true);
        }
        Event::Sent { op, status } => {
            if status == ucs_status_t::UCS_OK {
                s.replies_sent.fetch_add(1, Ordering::SeqCst);
                if let Some((ep, _)) = s.conns.get_mut(&op.conn) {
                    ep.send_completed();
                }
            }
            if s.conns.get(&op.conn).is_some_and(|(_, close)| *close) {
                s.conns.remove(&op.conn);
            }
        }
        Event::Failed { conn, .. } => {
            s.conns.remove(&conn);
        }
        // A raw server posts no one-sided reads.
        Event::Got { .. } => {}
    }
}

/// A client that sends raw bytes to a server and watches for the server closing on it.
pub struct RawClient {
    failed: Arc<Mutex<Option<String>>>,
    thread: RawThread,
}

struct ClientState {
    ep: Option<Endpoint>,
    failed: Arc<Mutex<Option<String>>>,
}

impl ClientState {
    fn fail(&mut self, status: ucs_status_t) {
        self.ep = None;
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed.get_or_insert_with(|| status_string(status));
    }
}

impl RawClient {
    /// Connects to `addr` with `config`'s UCX settings.
    pub fn connect(
        config: &TransportConfig,
        addr: SocketAddr,
    ) -> Result<RawClient, TransportError> {
        let failed = Arc::new(Mutex::new(None));
        let flag = failed.clone();
        let setup = move |worker: &Worker| {
            let ep = Endpoint::connect(worker, 1, addr)?;
            // Keep reading (and discarding) so that the server's sends complete.
            ep.recv(OpKind::Raw, Vec::new(), RAW_RECV_BYTES, false);
            Ok((
                ClientState {
                    ep: Some(ep),
                    failed: flag,
                },
                (),
            ))
        };
        let on_event = |_: &Worker, s: &mut ClientState, _: &mut ConnIds, event: Event| match event
        {
            Event::Failed { status, .. } => s.fail(status),
            Event::Received { status, buf, .. } => {
                if status != ucs_status_t::UCS_OK {
                    return s.fail(status);
                }
                if let Some(ep) = &s.ep {
                    ep.recv(OpKind::Raw, buf, RAW_RECV_BYTES, false);
                }
            }
            Event::Sent { status, .. } if status != ucs_status_t::UCS_OK => s.fail(status),
            Event::Sent { .. } => {
                if let Some(ep) = &mut s.ep {
                    ep.send_completed();
                }
            }
            _ => {}
        };
        let on_send = |s: &mut ClientState, bytes: Vec<u8>| {
            if let Some(ep) = &mut s.ep {
                ep.send(OpKind::Raw, Keep::Buf(bytes));
            }
        };
        let (thread, ()) = spawn(config, setup, on_event, on_send)?;
        Ok(RawClient { failed, thread })
    }

    /// Sends `bytes` as they are.
    pub fn send(&self, bytes: Vec<u8>) {
        let _ = self.thread.control.send(Control::Send(bytes));
        self.thread.waker.wake();
    }

    /// Waits up to `timeout` for the connection to fail; the UCX status if it did.
    pub fn wait_closed(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self
                .failed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
            {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
