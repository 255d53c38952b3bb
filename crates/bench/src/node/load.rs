//! The clients of `kvfabric bench node`: `clients` threads, each with its own HTTP/1
//! connection (a `ureq` agent, keep-alive), each putting its own distinct blocks one after the
//! other and then getting them back, all released together; per phase the bytes moved over
//! the wall time of the whole phase and every request's latency. Bytes are checked outside the
//! timed phases.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// Longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// One timed phase (all clients' puts, or all their gets).
#[derive(Debug, Clone, Default)]
pub(crate) struct Phase {
    /// Payload bytes moved.
    pub(crate) bytes: u64,
    /// From the release of the clients to the end of the last one.
    pub(crate) wall: Duration,
    /// Every request's latency, sorted.
    pub(crate) latencies: Vec<Duration>,
}

impl Phase {
    /// Payload GB/s (10^9 bytes per second) over the phase.
    pub(crate) fn gbps(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64().max(1e-9) / 1e9
    }

    /// The `q`-quantile latency (nearest rank), in milliseconds.
    pub(crate) fn quantile_ms(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let rank =
            ((q * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[rank - 1].as_secs_f64() * 1e3
    }
}

/// A put phase and the get phase after it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Round {
    pub(crate) put: Phase,
    pub(crate) get: Phase,
}

/// Where the clients send their requests and what they send.
pub(crate) struct Target<'a> {
    /// `http://IP:PORT` of the server.
    pub(crate) url: &'a str,
    /// `kvfabric-model`.
    pub(crate) model: &'a str,
    /// `kvfabric-tokens`.
    pub(crate) tokens: u32,
    /// A real node: gets are checked byte for byte (untimed) and blocks deleted afterwards.
    pub(crate) node: bool,
    /// Every node of its cluster (`url` included): a block is deleted on each afterwards, so
    /// replicas do not pile up across rounds.
    pub(crate) cleanup: &'a [String],
}

fn agent() -> ureq::Agent {
    kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build(),
    )
}

fn put(agent: &ureq::Agent, t: &Target<'_>, body: &[u8]) -> anyhow::Result<String> {
    let mut r = agent
        .put(format!("{}/v1/blocks", t.url))
        .header("kvfabric-model", t.model)
        .header("kvfabric-tokens", t.tokens.to_string())
        .send(body)
        .context("PUT /v1/blocks")?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .read_to_vec()
        .context("reading a put's answer")?;
    ensure!(
        status == 201,
        "PUT /v1/blocks: expected 201, found {status}: {}",
        String::from_utf8_lossy(&text)
    );
    let v: serde_json::Value = serde_json::from_slice(&text).context("a put's answer")?;
    v["block"]
        .as_str()
        .map(str::to_owned)
        .context("a put's answer names no block")
}

fn get(agent: &ureq::Agent, t: &Target<'_>, id: &str, len: usize) -> anyhow::Result<Vec<u8>> {
    let mut r = agent
        .get(format!("{}/v1/blocks/{id}", t.url))
        .call()
        .context("GET /v1/blocks/{id}")?;
    let status = r.status().as_u16();
    let body = r
        .body_mut()
        .with_config()
        .limit(len as u64 + 1)
        .read_to_vec()
        .context("reading a block")?;
    ensure!(
        status == 200,
        "GET /v1/blocks/{id}: expected 200, found {status}"
    );
    ensure!(
        body.len() == len,
        "GET /v1/blocks/{id}: expected {len} bytes, found {}",
        body.len()
    );
    Ok(body)
}

/// Deletes `id` on every node of the target (404 where a node holds no copy).
fn delete(agent: &ureq::Agent, t: &Target<'_>, id: &str) -> anyhow::Result<()> {
    for url in t.cleanup {
        let r = agent
            .delete(format!("{url}/v1/blocks/{id}"))
            .call()
            .context("DELETE /v1/blocks/{id}")?;
        let status = r.status().as_u16();
        ensure!(
            status == 204 || (status == 404 && url != t.url),
            "DELETE {url}/v1/blocks/{id}: expected 204, found {status}"
        );
    }
    Ok(())
}

/// Put body bytes the baseline at `url` received (`GET /received`).
pub(crate) fn received(url: &str) -> anyhow::Result<u64> {
    let mut r = agent()
        .get(format!("{url}/received"))
        .call()
        .context("GET /received")?;
    let text = r.body_mut().read_to_string().context("reading /received")?;
    text.trim()
        .parse()
        .with_context(|| format!("GET /received: expected a count, found {text:?}"))
}

/// What one client did.
struct ClientRun {
    put: (Instant, Instant, Vec<Duration>),
    get: (Instant, Instant, Vec<Duration>),
}

/// One round: every client puts its blocks (`payloads[c]`), then gets them back.
pub(crate) fn round(t: &Target<'_>, payloads: &[Vec<Vec<u8>>]) -> anyhow::Result<Round> {
    let clients = payloads.len();
    let barrier = Arc::new(Barrier::new(clients));
    let runs: Vec<anyhow::Result<ClientRun>> = std::thread::scope(|s| {
        let workers: Vec<_> = payloads
            .iter()
            .map(|blocks| {
                let barrier = Arc::clone(&barrier);
                s.spawn(move || client(t, blocks, &barrier))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| bail!("a client panicked")))
            .collect()
    });
    let runs = runs.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let bytes: u64 = payloads.iter().flatten().map(|p| p.len() as u64).sum();
    let phase = |pick: fn(&ClientRun) -> &(Instant, Instant, Vec<Duration>)| {
        let start = runs.iter().map(|r| pick(r).0).min().expect("a client");
        let end = runs.iter().map(|r| pick(r).1).max().expect("a client");
        let mut latencies: Vec<Duration> = runs.iter().flat_map(|r| pick(r).2.clone()).collect();
        latencies.sort_unstable();
        Phase {
            bytes,
            wall: end - start,
            latencies,
        }
    };
    Ok(Round {
        put: phase(|r| &r.put),
        get: phase(|r| &r.get),
    })
}

fn client(t: &Target<'_>, blocks: &[Vec<u8>], barrier: &Barrier) -> anyhow::Result<ClientRun> {
    let agent = agent();
    // Opens the connection (and warms both ends) before the clock starts; a node gets a block
    // it then deletes, the baseline a put it drops.
    if let Some(first) = blocks.first() {
        let mut warm = first.clone();
        warm[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        let id = put(&agent, t, &warm)?;
        get(&agent, t, &id, warm.len())?;
        if t.node {
            delete(&agent, t, &id)?;
        }
    }
    barrier.wait();
    let start = Instant::now();
    let mut ids = Vec::with_capacity(blocks.len());
    let mut lat = Vec::with_capacity(blocks.len());
    for b in blocks {
        let t0 = Instant::now();
        ids.push(put(&agent, t, b)?);
        lat.push(t0.elapsed());
    }
    let put_phase = (start, Instant::now(), lat);
    barrier.wait();
    let start = Instant::now();
    let mut lat = Vec::with_capacity(blocks.len());
    for (id, b) in ids.iter().zip(blocks) {
        let t0 = Instant::now();
        get(&agent, t, id, b.len())?;
        lat.push(t0.elapsed());
    }
    let get_phase = (start, Instant::now(), lat);
    if t.node {
        // Untimed: every block reads back as put, then goes.
        for (id, b) in ids.iter().zip(blocks) {
            let got = get(&agent, t, id, b.len())?;
            ensure!(got == *b, "block {id} read back other bytes than were put");
            delete(&agent, t, id)?;
        }
    }
    Ok(ClientRun {
        put: put_phase,
        get: get_phase,
    })
}

/// `clients` × `blocks` distinct payloads of `len` bytes (a fast generator: the bytes only need
/// to differ, the node does not interpret them); `stamp` makes every round's blocks new.
pub(crate) fn payloads(clients: usize, blocks: usize, len: usize) -> Vec<Vec<Vec<u8>>> {
    (0..clients)
        .map(|c| {
            (0..blocks)
                .map(|b| {
                    let mut x =
                        (((c as u64) << 32) | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    let mut out = Vec::with_capacity(len);
                    while out.len() < len {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                    out.truncate(len);
                    out
                })
                .collect()
        })
        .collect()
}

/// Makes every payload new content for round `stamp` (its first bytes), so no put dedups
/// against an earlier round's block.
pub(crate) fn stamp(payloads: &mut [Vec<Vec<u8>>], stamp: u32) {
    for (c, blocks) in payloads.iter_mut().enumerate() {
        for (b, p) in blocks.iter_mut().enumerate() {
            let tag = (u64::from(stamp) << 40) | ((c as u64) << 20) | b as u64;
            p[..8].copy_from_slice(&tag.to_le_bytes());
        }
    }
}
