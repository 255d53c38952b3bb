//! The ZeroMQ side of the event log, vLLM's `ZmqEventPublisher` protocol (pure-Rust `zeromq`
//! crate, no system library):
//!
//! - a PUB socket bound at `events.zmq_pub` sends every batch as the multipart message
//!   `[topic, seq as 8-byte big-endian, payload]` (payload: `kvfabric_core::events::wire`);
//! - a ROUTER socket bound at `events.zmq_replay` answers a request `["", start_seq as 8-byte
//!   big-endian]` (a DEALER's frames; the ROUTER sees the peer identity first) with
//!   `["", seq, payload]` for every buffered batch with `seq >= start_seq`, then
//!   `["", -1 as 8-byte big-endian, ""]`. A malformed request is counted and ignored.
//!
//! Both are operator-level: every event of every namespace, no token. They are off unless
//! configured; binding them anywhere but loopback exposes the stream to that network.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::config::EventsConfig;
use kvfabric_core::events::{Batch, EventLog};

/// The sequence number that ends a replay.
pub(crate) const END_SEQ: i64 = -1;
/// Longest wait to hand one replay message to a peer (a peer that does not read loses the
/// rest of its replay, and the next peer is served).
const REPLAY_SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed receive on the replay socket.
const RECV_BACKOFF: Duration = Duration::from_millis(100);

/// The running ZeroMQ sockets' tasks.
pub(crate) struct ZmqTasks {
    tasks: Vec<JoinHandle<()>>,
}

impl ZmqTasks {
    /// Stops both sockets.
    pub(crate) fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Binds the configured sockets and starts serving them; `None` when none is configured.
/// The publisher subscribes before returning, so it sends every batch published after.
pub(crate) async fn start(
    log: Arc<EventLog>,
    config: &EventsConfig,
) -> anyhow::Result<Option<ZmqTasks>> {
    let mut tasks = Vec::new();
    if let Some(endpoint) = &config.zmq_pub {
        let mut socket = PubSocket::new();
        let bound = socket
            .bind(endpoint)
            .await
            .with_context(|| format!("binding events.zmq_pub {endpoint}"))?;
        tracing::info!(endpoint = %bound, "events: ZeroMQ publisher bound");
        let topic = Bytes::from(config.topic.clone().into_bytes());
        let sub = log
            .subscribe(None)
            .expect("a live-only subscription has no gap");
        tasks.push(tokio::spawn(publish(log.clone(), socket, topic, sub.live)));
    }
    if let Some(endpoint) = &config.zmq_replay {
        let mut socket = RouterSocket::new();
        let bound = socket
            .bind(endpoint)
            .await
            .with_context(|| format!("binding events.zmq_replay {endpoint}"))?;
        tracing::info!(endpoint = %bound, "events: ZeroMQ replay bound");
        tasks.push(tokio::spawn(replay(log.clone(), socket)));
    }
    Ok((!tasks.is_empty()).then_some(ZmqTasks { tasks }))
}

fn frames(v: Vec<Bytes>) -> ZmqMessage {
    ZmqMessage::try_from(v).expect("never empty")
}

/// Sends every batch on the PUB socket; a publisher that lagged behind the broadcast takes
/// the missed batches from the ring (those still there).
async fn publish(
    log: Arc<EventLog>,
    mut socket: PubSocket,
    topic: Bytes,
    mut live: tokio::sync::broadcast::Receiver<Arc<Batch>>,
) {
    let mut next: Option<u64> = None;
    loop {
        let batches = match live.recv().await {
            Ok(b) => vec![b],
            Err(RecvError::Lagged(_)) => {
                let from = next.unwrap_or(0);
                let missed = log.buffered_from(from);
                if missed.first().is_some_and(|b| b.seq > from) {
                    log.metrics.gaps.inc();
                }
                missed
            }
            Err(RecvError::Closed) => return,
        };
        for b in batches {
            if next.is_some_and(|n| b.seq < n) {
                continue;
            }
            next = Some(b.seq + 1);
            let msg = frames(vec![
                topic.clone(),
                Bytes::copy_from_slice(&b.seq.to_be_bytes()),
                b.payload.clone(),
            ]);
            if let Err(e) = socket.send(msg).await {
                tracing::warn!(error = %e, seq = b.seq, "events: ZeroMQ publish failed");
            }
        }
    }
}

/// Serves replay requests on the ROUTER socket.
async fn replay(log: Arc<EventLog>, mut socket: RouterSocket) {
    loop {
        let msg = match socket.recv().await {
            Ok(m) => m.into_vec(),
            Err(e) => {
                tracing::debug!(error = %e, "events: ZeroMQ replay receive failed");
                tokio::time::sleep(RECV_BACKOFF).await;
                continue;
            }
        };
        let start = match msg.as_slice() {
            [_, delim, seq] if delim.is_empty() && seq.len() == 8 => {
                u64::from_be_bytes(seq[..].try_into().expect("8 bytes"))
            }
            _ => {
                log.metrics.zmq_bad_requests.inc();
                tracing::debug!(
                    frames = msg.len(),
                    "events: malformed ZeroMQ replay request"
                );
                continue;
            }
        };
        let peer = msg[0].clone();
        log.metrics.replays.inc();
        let batches = log.buffered_from(start);
        let oldest = batches.first().map_or(log.next_seq(), |b| b.seq);
        if start < oldest {
            log.metrics.gaps.inc();
        }
        let mut failed = false;
        for b in batches {
            let reply = frames(vec![
                peer.clone(),
                Bytes::new(),
                Bytes::copy_from_slice(&b.seq.to_be_bytes()),
                b.payload.clone(),
            ]);
            if !send_bounded(&mut socket, reply).await {
                failed = true;
                break;
            }
        }
        if !failed {
            let end = frames(vec![
                peer,
                Bytes::new(),
                Bytes::copy_from_slice(&END_SEQ.to_be_bytes()),
                Bytes::new(),
            ]);
            send_bounded(&mut socket, end).await;
        }
    }
}

/// Sends one replay message within [`REPLAY_SEND_TIMEOUT`]; `false` when it failed.
async fn send_bounded(socket: &mut RouterSocket, msg: ZmqMessage) -> bool {
    match tokio::time::timeout(REPLAY_SEND_TIMEOUT, socket.send(msg)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "events: ZeroMQ replay send failed");
            false
        }
        Err(_) => {
            tracing::debug!("events: ZeroMQ replay peer does not read; its replay is cut");
            false
        }
    }
}
