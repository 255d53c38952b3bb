//! Running the agents against the cluster: lookup, read what the fabric has (checking every
//! byte against the engine), compute and put what it has not.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kvfabric_progress::{Progress, Unit};
use kvfabric_store::{chunk_keys, ChunkKey, ChunkMode, ModelGeometry, NamespaceKey};
use serde_json::{json, Value};

use super::workload::{engine_block, AgentPlan, ChunkKind};
use crate::client::{read_body, read_json, Client};

/// Chunk keys per `POST /v1/lookup` (the node's default limit).
const LOOKUP_BATCH: usize = 1024;

/// What an interrupted run fails with.
pub const INTERRUPTED: &str = "interrupted";

/// One node as the demo reaches it.
pub struct NodeApi {
    /// `n<id>`.
    pub name: String,
    /// A client of it.
    pub client: Client,
}

/// What one agent did.
#[derive(Debug, Default, Clone)]
pub struct AgentOutcome {
    /// Chunks in its prompt.
    pub chunks: u64,
    /// Chunks whose block the fabric had (read, not computed), by [`ChunkKind`] order.
    pub hits: [u64; 4],
    /// Of those, the reads the node served by fetching from another node.
    pub remote_reads: u64,
    /// Reads whose bytes differed from what the engine computes.
    pub mismatches: u64,
    /// Chunks computed and put.
    pub computed: u64,
    /// Puts by dedup outcome: new, shared, collision.
    pub puts: [u64; 3],
    /// Verified copies the puts reported, summed.
    pub replicas: u64,
    /// The fewest copies one put reported.
    pub replicas_min: Option<u64>,
    /// Wall time.
    pub elapsed: Duration,
}

impl AgentOutcome {
    /// Chunks read from the fabric.
    pub fn reused(&self) -> u64 {
        self.hits.iter().sum()
    }
}

fn kind_index(k: ChunkKind) -> usize {
    match k {
        ChunkKind::System => 0,
        ChunkKind::Preamble => 1,
        ChunkKind::Document => 2,
        ChunkKind::Question => 3,
    }
}

/// `POST /v1/lookup` of `keys` on `node`: each key's block and owners, in order.
pub fn lookup(node: &NodeApi, keys: &[ChunkKey]) -> anyhow::Result<Vec<(Option<String>, usize)>> {
    let mut out = Vec::with_capacity(keys.len());
    for batch in keys.chunks(LOOKUP_BATCH) {
        let body = json!({ "keys": batch.iter().map(ChunkKey::to_hex).collect::<Vec<_>>() });
        let mut resp = node.client.post_json("/v1/lookup", &body)?;
        let v = read_json(&mut resp)?;
        let results = v
            .get("results")
            .and_then(Value::as_array)
            .with_context(|| format!("{}: lookup answer without results: {v}", node.name))?;
        if results.len() != batch.len() {
            bail!(
                "{}: lookup of {} keys answered {} results",
                node.name,
                batch.len(),
                results.len()
            );
        }
        for (k, r) in batch.iter().zip(results) {
            if r.get("key").and_then(Value::as_str) != Some(k.to_hex().as_str()) {
                bail!("{}: lookup results out of order: {r}", node.name);
            }
            let block = r.get("block").and_then(Value::as_str).map(str::to_owned);
            let owners = r
                .get("owners")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            out.push((block, owners));
        }
    }
    Ok(out)
}

/// Runs one agent on its node.
fn run_agent(
    g: &ModelGeometry,
    ns: &NamespaceKey,
    node: &NodeApi,
    plan: &AgentPlan,
    stop: &AtomicBool,
    bar: &Progress,
) -> anyhow::Result<AgentOutcome> {
    let start = Instant::now();
    let bt = g.block_tokens() as usize;
    let keys = chunk_keys(ns, g, ChunkMode::Independent, &plan.tokens);
    let found = lookup(node, &keys)?;
    let mut o = AgentOutcome {
        chunks: keys.len() as u64,
        ..AgentOutcome::default()
    };
    for (((key, chunk), (block, _)), kind) in keys
        .iter()
        .zip(plan.tokens.chunks_exact(bt))
        .zip(&found)
        .zip(&plan.kinds)
    {
        if stop.load(Ordering::Relaxed) {
            bail!(INTERRUPTED);
        }
        let expected = engine_block(g, chunk);
        match block {
            Some(id) => {
                let mut resp = node.client.get(&format!("/v1/blocks/{id}"))?;
                let source = resp
                    .headers()
                    .get("kvfabric-source")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let got = read_body(&mut resp)?;
                o.mismatches += u64::from(got != expected);
                o.hits[kind_index(*kind)] += 1;
                o.remote_reads += u64::from(source != "local");
            }
            None => {
                let headers = [
                    ("kvfabric-model", g.name.clone()),
                    ("kvfabric-tokens", bt.to_string()),
                    ("kvfabric-chunk-key", key.to_hex()),
                ];
                let mut resp = node.client.put("/v1/blocks", &headers, &expected)?;
                let v = read_json(&mut resp)?;
                let slot = match v.get("dedup").and_then(Value::as_str) {
                    Some("new") => 0,
                    Some("shared") => 1,
                    Some("collision") => 2,
                    _ => bail!("{}: put answer without a dedup outcome: {v}", node.name),
                };
                o.puts[slot] += 1;
                let replicas = v
                    .get("replicas")
                    .and_then(Value::as_u64)
                    .with_context(|| format!("{}: put answer without replicas: {v}", node.name))?;
                o.replicas += replicas;
                o.replicas_min = Some(o.replicas_min.map_or(replicas, |m| m.min(replicas)));
                o.computed += 1;
            }
        }
        bar.inc(1);
    }
    o.elapsed = start.elapsed();
    Ok(o)
}

/// Runs every agent, `parallel` at a time, with a bar of the chunks read or computed (on a
/// terminal) and one line per agent on stderr; the outcomes in agent order. Stops at the first failure or when `stop` is raised.
pub fn run_all(
    g: &ModelGeometry,
    ns: &NamespaceKey,
    nodes: &[NodeApi],
    plans: &[AgentPlan],
    parallel: usize,
    stop: &AtomicBool,
) -> anyhow::Result<Vec<AgentOutcome>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let outcomes: Mutex<Vec<Option<AgentOutcome>>> = Mutex::new(vec![None; plans.len()]);
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let bt = g.block_tokens() as usize;
    let chunks: usize = plans.iter().map(|p| p.tokens.len() / bt.max(1)).sum();
    let bar = Progress::new("demo", chunks as u64, Unit::Items("chunks"));
    bar.message(format!("0/{} agents done", plans.len()));
    let bar = &bar;
    std::thread::scope(|s| {
        for _ in 0..parallel.clamp(1, plans.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= plans.len() || failed.load(Ordering::Relaxed) || stop.load(Ordering::Relaxed)
                {
                    return;
                }
                let plan = &plans[i];
                let node = &nodes[plan.node];
                match run_agent(g, ns, node, plan, stop, bar) {
                    Ok(o) => {
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        bar.message(format!("{n}/{} agents done", plans.len()));
                        bar.line(format!(
                            "[{n:>2}/{}] agent {:02} on {} (docs {}): {} chunks, {} reused ({} fetched from another node), {} computed, {:.2} s",
                            plans.len(),
                            plan.index,
                            node.name,
                            plan.docs
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(" "),
                            o.chunks,
                            o.reused(),
                            o.remote_reads,
                            o.computed,
                            o.elapsed.as_secs_f64()
                        ));
                        outcomes.lock().expect("not poisoned")[i] = Some(o);
                    }
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        let mut slot = first_error.lock().expect("not poisoned");
                        if slot.is_none() {
                            *slot = Some(e.context(format!("agent {:02} on {}", plan.index, node.name)));
                        }
                    }
                }
            });
        }
    });
    bar.finish();
    if stop.load(Ordering::Relaxed) {
        bail!(INTERRUPTED);
    }
    if let Some(e) = first_error.into_inner().expect("not poisoned") {
        return Err(e);
    }
    outcomes
        .into_inner()
        .expect("not poisoned")
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.with_context(|| format!("agent {i:02} did not run")))
        .collect()
}

/// Tokens a prefix-only cache would have reused, per agent: those whose prefix-mode key an
/// earlier agent (in agent order) had already put. Generous to the baseline: it assumes every
/// earlier agent finished first and nothing was evicted.
pub fn prefix_baseline(g: &ModelGeometry, ns: &NamespaceKey, plans: &[AgentPlan]) -> Vec<u64> {
    let bt = u64::from(g.block_tokens());
    let mut seen: HashSet<ChunkKey> = HashSet::new();
    plans
        .iter()
        .map(|p| {
            let keys = chunk_keys(ns, g, ChunkMode::Prefix, &p.tokens);
            let reused = keys.iter().filter(|k| seen.contains(*k)).count() as u64 * bt;
            seen.extend(keys);
            reused
        })
        .collect()
}

/// The distinct independent-mode keys of the whole workload, in first-seen order.
pub fn distinct_keys(g: &ModelGeometry, ns: &NamespaceKey, plans: &[AgentPlan]) -> Vec<ChunkKey> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in plans {
        for k in chunk_keys(ns, g, ChunkMode::Independent, &p.tokens) {
            if seen.insert(k) {
                out.push(k);
            }
        }
    }
    out
}

/// `GET /metrics` of `node`.
pub fn metrics(node: &NodeApi) -> anyhow::Result<String> {
    let mut resp = node.client.get("/metrics")?;
    let body = read_body(&mut resp)?;
    String::from_utf8(body).with_context(|| format!("{}: /metrics is not UTF-8", node.name))
}
