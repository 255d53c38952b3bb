//! A vLLM-style KV-event consumer for the tests: decodes the msgpack `KVEventBatch` payloads
//! into typed events, asks the ROUTER socket for a replay, and rebuilds a node's held blocks.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;

use rmpv::Value;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::events_client::EVENT_TIMEOUT;

/// One decoded vLLM KV event.
#[derive(Debug, Clone, PartialEq)]
pub enum KvEvent {
    Stored {
        hashes: Vec<Vec<u8>>,
        block_size: u64,
        medium: Option<String>,
    },
    Removed {
        hashes: Vec<Vec<u8>>,
        medium: Option<String>,
    },
    AllCleared,
}

/// Decodes one `KVEventBatch` payload: `[ts, [event, …], data_parallel_rank]`.
pub fn decode(payload: &[u8]) -> (f64, Vec<KvEvent>) {
    let v = rmpv::decode::read_value(&mut &payload[..]).expect("msgpack");
    let batch = v.as_array().expect("a batch is an array");
    assert!(batch.len() == 2 || batch.len() == 3, "{v}");
    let ts = batch[0].as_f64().expect("ts is a float");
    if let Some(rank) = batch.get(2) {
        assert!(rank.is_nil() || rank.is_u64(), "{v}");
    }
    let hashes = |h: &Value| -> Vec<Vec<u8>> {
        h.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_slice().expect("a block hash is bytes").to_vec())
            .collect()
    };
    let medium = |m: &Value| m.as_str().map(str::to_owned);
    let events = batch[1]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            let f = e.as_array().expect("an event is a tagged array");
            match f[0].as_str().expect("tag") {
                "BlockStored" => {
                    assert_eq!(f.len(), 7, "{e}");
                    assert!(f[2].is_nil() && f[5].is_nil(), "{e}");
                    assert!(f[3].as_array().unwrap().is_empty(), "{e}");
                    KvEvent::Stored {
                        hashes: hashes(&f[1]),
                        block_size: f[4].as_u64().unwrap(),
                        medium: medium(&f[6]),
                    }
                }
                "BlockRemoved" => {
                    assert_eq!(f.len(), 3, "{e}");
                    KvEvent::Removed {
                        hashes: hashes(&f[1]),
                        medium: medium(&f[2]),
                    }
                }
                "AllBlocksCleared" => KvEvent::AllCleared,
                other => panic!("unknown event {other}"),
            }
        })
        .collect();
    (ts, events)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A vLLM-style consumer's view of one node: the block hashes it holds, rebuilt from batches.
#[derive(Default)]
pub struct Consumer {
    pub held: BTreeSet<String>,
    pub next_seq: u64,
}

impl Consumer {
    pub fn apply(&mut self, seq: u64, events: &[KvEvent]) {
        assert_eq!(seq, self.next_seq, "gap-free sequence numbers");
        self.next_seq = seq + 1;
        for e in events {
            match e {
                KvEvent::AllCleared => self.held.clear(),
                KvEvent::Stored { hashes, .. } => self.held.extend(hashes.iter().map(|h| hex(h))),
                KvEvent::Removed { hashes, .. } => {
                    for h in hashes {
                        self.held.remove(&hex(h));
                    }
                }
            }
        }
    }
}

/// Asks the replay socket for every batch from `start`: `(seq, payload)` until the end marker.
pub async fn replay(endpoint: &str, start: u64) -> Vec<(u64, Vec<u8>)> {
    let mut dealer = DealerSocket::new();
    dealer.connect(endpoint).await.unwrap();
    let req = ZmqMessage::try_from(vec![
        bytes::Bytes::new(),
        bytes::Bytes::copy_from_slice(&start.to_be_bytes()),
    ])
    .unwrap();
    dealer.send(req).await.unwrap();
    let mut out = Vec::new();
    loop {
        let m = tokio::time::timeout(EVENT_TIMEOUT, dealer.recv())
            .await
            .expect("a replay answer in time")
            .unwrap()
            .into_vec();
        assert_eq!(m.len(), 3, "[\"\", seq, payload]");
        assert!(m[0].is_empty());
        let seq = i64::from_be_bytes(m[1][..].try_into().unwrap());
        if seq == -1 {
            assert!(m[2].is_empty());
            return out;
        }
        out.push((seq as u64, m[2].to_vec()));
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
