//! A ZeroMQ client of a node's event sockets for kvfabric-specific checks: the framing of the
//! PUB and replay sockets, sequence numbers across restarts, which hashes a batch names.
//! It reads the msgpack payload as generic msgpack (field by name), not as a decoder of the
//! vLLM format: the proof that vLLM's and Dynamo's own decoders accept the payload is
//! `python/tests/test_events_wire.py` (vLLM's `KVEventBatch`) and `crates/router-compat`
//! (Dynamo's `zmq_wire`).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;

use rmpv::Value;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::events_client::EVENT_TIMEOUT;

/// One event of a batch: its `type`, `block_hashes` and `medium`.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub kind: String,
    pub hashes: Vec<u64>,
    pub medium: Option<String>,
}

fn field<'a>(event: &'a Value, name: &str) -> Option<&'a Value> {
    event
        .as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

/// The events of one payload `[ts, [event, …], dp_rank]`, and its `ts`.
pub fn events(payload: &[u8]) -> (f64, Vec<Seen>) {
    let v = rmpv::decode::read_value(&mut &payload[..]).expect("msgpack");
    let batch = v.as_array().expect("a batch is an array");
    let ts = batch[0].as_f64().expect("ts");
    let seen = batch[1]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| Seen {
            kind: field(e, "type")
                .and_then(Value::as_str)
                .expect("type")
                .to_owned(),
            hashes: field(e, "block_hashes")
                .and_then(Value::as_array)
                .map(|h| h.iter().map(|x| x.as_u64().expect("an int hash")).collect())
                .unwrap_or_default(),
            medium: field(e, "medium")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
        .collect();
    (ts, seen)
}

/// The hash a block put without an engine identity is published under (docs/API.md).
pub fn fallback_hash(block_hex: &str) -> u64 {
    u64::from_str_radix(&block_hex[48..64], 16).unwrap()
}

/// What a consumer knows of one node: the hashes it holds, rebuilt from batches in order.
#[derive(Default)]
pub struct Held {
    pub hashes: BTreeSet<u64>,
    pub next_seq: u64,
}

impl Held {
    pub fn apply(&mut self, seq: u64, events: &[Seen]) {
        assert_eq!(seq, self.next_seq, "gap-free sequence numbers");
        self.next_seq = seq + 1;
        for e in events {
            match e.kind.as_str() {
                "AllBlocksCleared" => self.hashes.clear(),
                "BlockStored" => self.hashes.extend(&e.hashes),
                "BlockRemoved" => {
                    for h in &e.hashes {
                        self.hashes.remove(h);
                    }
                }
                other => panic!("unknown event {other}"),
            }
        }
    }
}

/// Asks a replay socket for every batch from `start` (of `topic`'s member when given), as
/// vLLM's replay answers: `(topic, seq, payload)` until the end marker.
pub async fn replay(
    endpoint: &str,
    topic: Option<&str>,
    start: u64,
) -> Vec<(String, u64, Vec<u8>)> {
    let mut dealer = DealerSocket::new();
    dealer.connect(endpoint).await.unwrap();
    let mut frames = vec![bytes::Bytes::new()];
    if let Some(t) = topic {
        frames.push(bytes::Bytes::copy_from_slice(t.as_bytes()));
    }
    frames.push(bytes::Bytes::copy_from_slice(&start.to_be_bytes()));
    dealer
        .send(ZmqMessage::try_from(frames).unwrap())
        .await
        .unwrap();
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout(EVENT_TIMEOUT, dealer.recv())
            .await
            .expect("a replay answer in time")
            .unwrap()
            .into_vec();
        assert_eq!(m.len(), 4, "[\"\", topic, seq, payload]");
        assert!(m[0].is_empty());
        let seq = i64::from_be_bytes(m[2][..].try_into().unwrap());
        if seq == -1 {
            assert!(m[1].is_empty() && m[3].is_empty());
            return out;
        }
        out.push((
            String::from_utf8(m[1].to_vec()).unwrap(),
            seq as u64,
            m[3].to_vec(),
        ));
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
