//! The progress thread: owns the UCP context, worker, listener and every endpoint of one
//! transport, and is the only thread that touches them (`UCS_THREAD_MODE_SINGLE`).
//!
//! Each turn: drain commands, one `ucp_worker_progress`, handle the events callbacks queued —
//! repeated while any of the three did something (then clear the waker and look at the
//! commands once more, so no wake-up is lost). Then the timers (connect,
//! idle, request, send), then sleep: `ucp_worker_arm` and `poll` on the worker's event fd and
//! the waker's eventfd until the next deadline (at most [`IDLE_WAKE_MS_MAX`]). Idle, the
//! thread sleeps; it never spins.
//!
//! Shutdown (a [`Command::Shutdown`], or every mailbox dropped): fail pending fetches with
//! `Closed`, abandon lookups, force-close every endpoint, wait (at most
//! [`CLOSE_WAIT_MS_MAX`]) for the closes to complete so that UCX hands every buffer back, then
//! destroy the listener, the worker and the context, in that order. A process that exits
//! stops every thread the same way and waits for its teardown ([`super::exit`]).

use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::config::TransportConfig;
use crate::counters::TransportCounters;
use crate::error::TransportError;
use crate::source::BlockSource;
use crate::ucx::client::Clients;
use crate::ucx::context::Context;
use crate::ucx::exit;
use crate::ucx::mailbox::{Command, Mailbox};
use crate::ucx::server::Servers;
use crate::ucx::worker::{ConnIds, Event, OpKind, Waker, Worker};

/// Longest sleep with nothing scheduled: a safety net, not a poll loop.
pub(crate) const IDLE_WAKE_MS_MAX: u64 = 1_000;
/// Longest wait for endpoint closes to complete at shutdown.
pub(crate) const CLOSE_WAIT_MS_MAX: u64 = 1_000;

/// What a started thread reports.
pub(crate) struct Started {
    /// Where its listener is bound.
    pub(crate) addr: SocketAddr,
}

/// Everything the thread needs to start.
pub(crate) struct Spec {
    pub(crate) config: TransportConfig,
    pub(crate) listen: SocketAddr,
    pub(crate) source: Arc<dyn BlockSource>,
    pub(crate) runtime: Handle,
    pub(crate) counters: Arc<TransportCounters>,
}

/// Starts the progress thread; it reports its listener address (or why it could not start)
/// on the returned channel, then runs until shut down.
pub(crate) fn start(
    spec: Spec,
    name: &str,
) -> Result<(Mailbox, oneshot::Receiver<Result<Started, TransportError>>), TransportError> {
    let waker = Arc::new(Waker::new()?);
    let (mailbox, commands) = Mailbox::new(waker.clone());
    let (ready, started) = oneshot::channel();
    let thread_mailbox = mailbox.clone();
    std::thread::Builder::new()
        .name(format!("ucx-{name}"))
        .spawn(move || {
            // Held until everything below is destroyed: exit waits for it (see `exit`).
            let _live = exit::register(waker.clone());
            match Progress::new(spec, thread_mailbox, commands, waker) {
                Ok(progress) => {
                    let addr = progress.servers.local_addr();
                    let _ = ready.send(
                        addr.map(|addr| Started { addr })
                            .ok_or(TransportError::Closed),
                    );
                    progress.run();
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                }
            }
        })
        .map_err(|e| TransportError::io("spawning the UCX progress thread", e))?;
    Ok((mailbox, started))
}

struct Progress {
    clients: Clients,
    servers: Servers,
    ids: ConnIds,
    commands: Receiver<Command>,
    waker: Arc<Waker>,
    stopping: Option<Instant>,
    done: Vec<oneshot::Sender<()>>,
    /// Last: destroyed after every endpoint and the listener.
    worker: Worker,
}

impl Progress {
    fn new(
        spec: Spec,
        mailbox: Mailbox,
        commands: Receiver<Command>,
        waker: Arc<Waker>,
    ) -> Result<Progress, TransportError> {
        let worker = Worker::new(Context::new(&spec.config)?)?;
        let servers = Servers::bind(
            &worker,
            spec.listen,
            spec.config.clone(),
            spec.counters.clone(),
            spec.source,
            spec.runtime,
            mailbox,
        )?;
        Ok(Progress {
            clients: Clients::new(spec.config, spec.counters),
            servers,
            ids: ConnIds::default(),
            commands,
            waker,
            stopping: None,
            done: Vec::new(),
            worker,
        })
    }

    fn run(mut self) {
        loop {
            self.turn();
            if exit::exiting() {
                self.stop();
            }
            let now = Instant::now();
            self.clients.tick(now);
            self.servers.tick(now);
            if let Some(since) = self.stopping {
                let waited = now.duration_since(since);
                if self.worker.endpoints() == 0
                    || waited >= Duration::from_millis(CLOSE_WAIT_MS_MAX)
                {
                    break;
                }
            }
            let mut wake = now + Duration::from_millis(IDLE_WAKE_MS_MAX);
            for d in [self.clients.next_deadline(), self.servers.next_deadline()]
                .into_iter()
                .flatten()
            {
                wake = wake.min(d);
            }
            if self.stopping.is_some() {
                wake = wake.min(now + Duration::from_millis(10));
            }
            // Round up so a deadline is never missed by a truncated millisecond.
            let timeout_ms = wake
                .saturating_duration_since(now)
                .as_micros()
                .div_ceil(1000);
            if let Err(e) = self.worker.sleep(&self.waker, timeout_ms as i32) {
                tracing::warn!(error = %e, "UCX progress thread could not sleep; backing off");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.teardown();
    }

    /// Commands, progress and events until none of them has anything left. The waker is
    /// cleared only when the thread is about to sleep, and the commands drained once more
    /// after that, so no wake is lost and a busy thread makes no eventfd syscall per round.
    fn turn(&mut self) {
        loop {
            let mut busy = self.drain_commands();
            busy |= self.worker.progress();
            let events = self.worker.take_events();
            busy |= !events.is_empty();
            for event in events {
                self.event(event);
            }
            if !busy {
                self.waker.reset();
                if !self.drain_commands() {
                    return;
                }
            }
        }
    }

    /// Handles every queued command; whether there was any.
    fn drain_commands(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.commands.try_recv() {
                Ok(command) => {
                    any = true;
                    self.command(command);
                }
                Err(TryRecvError::Empty) => return any,
                Err(TryRecvError::Disconnected) => {
                    self.stop();
                    return any;
                }
            }
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Fetch {
                token,
                peer,
                request,
                body,
                receipt,
            } => {
                if self.stopping.is_some() {
                    return receipt.fail(TransportError::Closed);
                }
                self.clients.fetch(
                    &self.worker,
                    &mut self.ids,
                    token,
                    (peer, request, body),
                    receipt,
                );
            }
            Command::Abandon { token } => self.clients.abandon(token),
            Command::LookupDone {
                conn,
                seq,
                request,
                answer,
            } => self
                .servers
                .lookup_done(&self.worker, conn, seq, request, answer),
            Command::Shutdown { done } => {
                self.done.extend(done);
                self.stop();
            }
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Sent { op, status } => match op.kind {
                OpKind::Close => self.worker.endpoint_closed(),
                OpKind::Request => self.clients.on_sent(op, status),
                OpKind::Response(_) => self.servers.on_sent(op, status),
                _ => {}
            },
            Event::Received {
                op,
                status,
                buf,
                length,
            } => match op.kind {
                OpKind::Header | OpKind::Chunk | OpKind::Descriptor => {
                    self.clients
                        .on_received(&self.worker, op, status, buf, length)
                }
                OpKind::Requests => self.servers.on_received(op.conn, status, buf, length),
                _ => {}
            },
            Event::Got { op, status, held } => {
                // Released here, outside UCX, before the read may claim its buffer back.
                drop(held);
                self.clients.on_got(op, status);
            }
            Event::Failed { conn, status } => {
                if self.clients.owns(conn) {
                    self.clients.on_failed(conn, status);
                } else if self.servers.owns(conn) {
                    self.servers.on_failed(conn, status);
                }
            }
            Event::ConnRequest(request) => self.servers.on_conn_request(
                &self.worker,
                &mut self.ids,
                request,
                self.stopping.is_some(),
            ),
        }
    }

    fn stop(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        tracing::debug!("UCX transport stopping");
        self.stopping = Some(Instant::now());
        self.clients.shutdown();
        self.servers.shutdown();
    }

    fn teardown(mut self) {
        self.stop();
        self.servers.stop_listening();
        if self.worker.endpoints() > 0 {
            tracing::warn!(
                endpoints = self.worker.endpoints(),
                "UCX endpoint closes still pending at shutdown; their buffers are leaked, not freed"
            );
        }
        let Progress {
            clients,
            servers,
            done,
            worker,
            ..
        } = self;
        // Endpoints, leases and the listener before the worker, the worker before the context.
        drop((clients, servers));
        drop(worker);
        for d in done {
            let _ = d.send(());
        }
    }
}
