//! The workload: concurrent clients putting blocks under fresh chunk keys, getting acknowledged
//! blocks from any node, looking chunk keys up linearizably and asking `POST /v1/route` for
//! them on any node, every operation recorded, plus one reader per node doing linearizable
//! lookups of the newest keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::client::{Client, Outcome};
use crate::history::{Op, Recorder, Request};
use crate::rng::Rng;

/// Client ids of the per-node readers start here (reader of node `n`: this + `n`).
pub const READER_CLIENT_BASE: u32 = 1000;

/// Keys and blocks the clients have used, shared so that reads target recent writes.
#[derive(Debug, Default)]
pub struct Known {
    /// Chunk keys whose put was invoked.
    pub keys: Vec<String>,
    /// Acknowledged blocks and their payload seeds.
    pub blocks: Vec<(String, u64)>,
}

/// The running clients.
pub struct Workload {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn recent<T: Clone>(v: &[T], rng: &mut Rng) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    let window = v.len().min(64) as u64;
    Some(v[v.len() - 1 - rng.below(window) as usize].clone())
}

impl Workload {
    /// Starts `clients` threads against `apis` (index `i` is node `i + 1`).
    pub fn start(
        clients: u32,
        apis: Vec<String>,
        rec: Recorder,
        rng: &mut Rng,
        timeout: Duration,
    ) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let known = Arc::new(Mutex::new(Known::default()));
        let threads = (0..clients)
            .map(|c| {
                let mut rng = rng.fork(u64::from(c));
                let (stop, known, rec, apis) =
                    (stop.clone(), known.clone(), rec.clone(), apis.clone());
                let client = Client::new(timeout);
                std::thread::spawn(move || {
                    let mut seq = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let node = rng.below(apis.len() as u64) + 1;
                        let api = &apis[node as usize - 1];
                        let roll = rng.below(100);
                        let request = {
                            let k = known.lock().unwrap_or_else(|p| p.into_inner());
                            if roll < 40 || k.blocks.is_empty() {
                                None
                            } else if roll < 65 {
                                recent(&k.blocks, &mut rng)
                                    .map(|(block, seed)| Request::Get { block, seed })
                            } else if roll < 88 {
                                recent(&k.keys, &mut rng).map(|key| Request::Lookup { key })
                            } else {
                                recent(&k.keys, &mut rng).map(|key| Request::Route { key })
                            }
                        };
                        let request = request.unwrap_or_else(|| {
                            seq += 1;
                            let seed = (u64::from(c) << 40) | seq | (rng.next_u64() << 48);
                            let key = format!(
                                "{:016x}{:016x}{:016x}{:016x}",
                                rng.next_u64(),
                                rng.next_u64(),
                                rng.next_u64(),
                                seed
                            );
                            Request::Put { seed, key }
                        });
                        if let Request::Put { key, .. } = &request {
                            known
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .keys
                                .push(key.clone());
                        }
                        let invoke_ms = rec.now_ms();
                        let outcome = match &request {
                            Request::Put { seed, key } => client.put(api, *seed, key),
                            Request::Get { block, seed } => client.get(api, block, *seed),
                            Request::Lookup { key } => client.lookup(api, key),
                            Request::Route { key } => client.route(api, key),
                        };
                        let complete_ms = rec.now_ms();
                        if let (Request::Put { seed, .. }, Outcome::Put { block, .. }) =
                            (&request, &outcome)
                        {
                            known
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .blocks
                                .push((block.clone(), *seed));
                        }
                        if matches!(outcome, Outcome::NoAnswer { .. }) {
                            // A dead or paused node: do not spin on it.
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        rec.op(Op {
                            client: c,
                            node,
                            request,
                            invoke_ms,
                            complete_ms,
                            outcome,
                        });
                    }
                })
            })
            .collect::<Vec<_>>();
        let mut threads = threads;
        // One reader pinned to each node: linearizable lookups of the newest keys, so that
        // every node, an isolated one included, keeps answering reads the checker can judge
        // (the other clients get stuck on a cut-off node's writes).
        for (i, api) in apis.iter().enumerate() {
            let node = i as u64 + 1;
            let mut rng = rng.fork(1000 + node);
            let (stop, known, rec, api) = (stop.clone(), known.clone(), rec.clone(), api.clone());
            let client = Client::new(timeout);
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let key = {
                        let k = known.lock().unwrap_or_else(|p| p.into_inner());
                        let n = k.keys.len().min(16) as u64;
                        (n > 0).then(|| k.keys[k.keys.len() - 1 - rng.below(n) as usize].clone())
                    };
                    let Some(key) = key else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    let invoke_ms = rec.now_ms();
                    let outcome = client.lookup(&api, &key);
                    let complete_ms = rec.now_ms();
                    rec.op(Op {
                        client: READER_CLIENT_BASE + node as u32,
                        node,
                        request: Request::Lookup { key },
                        invoke_ms,
                        complete_ms,
                        outcome,
                    });
                    std::thread::sleep(Duration::from_millis(100));
                }
            }));
        }
        Workload { stop, threads }
    }

    /// Stops the clients and waits for their last operations.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
