//! One `POST /v1/generate` on the simulated engine: chunk keys in both modes, one lookup on
//! its node, a GET for every chunk the fabric has (the node fetches remote blocks and verifies
//! them; every byte is compared with what the engine computes), a paced "prefill" for every
//! chunk it has not, and a PUT of each computed block under both chunk keys.
//!
//! Blocking (the node client is blocking); the server runs it on tokio's blocking pool.

use std::time::{Duration, Instant};

use anyhow::Context;
use kvfabric_store::{chunk_keys, ChunkMode};
use serde_json::{json, Value};

use super::Engine;
use crate::client::{read_body, read_json};
use crate::demo::driver::lookup;
use crate::demo::workload::engine_block;
use crate::json_api::LookupMode;

/// What one request did, as the engine answers it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Generated {
    /// Whole chunks in the prompt.
    pub chunks: u64,
    /// Tokens in the prompt.
    pub tokens: u64,
    /// Chunks read from the engine's own node.
    pub hits_local: u64,
    /// Chunks its node fetched from another node.
    pub hits_remote: u64,
    /// Tokens prefilled (missed chunks and the partial tail).
    pub recomputed_tokens: u64,
    /// Payload bytes of the remote hits.
    pub bytes_fetched: u64,
    /// Blocks read whose bytes differed from what the engine computes (0 when correct).
    pub mismatches: u64,
    /// From the request's start to the first chunk's bytes (read or computed).
    pub time_to_first_block_ms: f64,
    /// The whole request.
    pub total_ms: f64,
}

impl Generated {
    /// The JSON answer (`request_id` and `mode` added by the caller).
    pub fn to_json(&self) -> Value {
        json!({
            "chunks": self.chunks,
            "tokens": self.tokens,
            "hits_local": self.hits_local,
            "hits_remote": self.hits_remote,
            "recomputed_tokens": self.recomputed_tokens,
            "bytes_fetched": self.bytes_fetched,
            "mismatches": self.mismatches,
            "time_to_first_block_ms": self.time_to_first_block_ms,
            "total_ms": self.total_ms,
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs one request of `tokens` in `mode` on `engine`.
pub fn generate(engine: &Engine, tokens: &[u32], mode: LookupMode) -> anyhow::Result<Generated> {
    let start = Instant::now();
    let g = &engine.geometry;
    let bt = g.block_tokens() as usize;
    let prefix = chunk_keys(&engine.namespace, g, ChunkMode::Prefix, tokens);
    let independent = chunk_keys(&engine.namespace, g, ChunkMode::Independent, tokens);
    let n = prefix.len();
    // The block each chunk can be read from, if any.
    let mut blocks: Vec<Option<String>> = vec![None; n];
    match mode {
        LookupMode::Any => {
            let mut keys = prefix.clone();
            keys.extend_from_slice(&independent);
            let found = lookup(&engine.node, &keys)?;
            for (i, b) in blocks.iter_mut().enumerate() {
                *b = found[i].0.clone().or_else(|| found[n + i].0.clone());
            }
        }
        LookupMode::Prefix => {
            let found = lookup(&engine.node, &prefix)?;
            for (b, (block, _)) in blocks.iter_mut().zip(found) {
                let Some(id) = block else { break };
                // Held by this engine's node itself (a HEAD answers as a GET would, so an
                // owner elsewhere answers 200 too, naming itself in `kvfabric-source`).
                let (status, source) = engine.node.client.head(&format!("/v1/blocks/{id}"))?;
                let local = status == 200 && source.as_deref() == Some("local");
                if !local {
                    break;
                }
                *b = Some(id);
            }
        }
    }
    let mut out = Generated {
        chunks: n as u64,
        tokens: tokens.len() as u64,
        ..Generated::default()
    };
    let mut first: Option<Duration> = None;
    for (i, chunk) in tokens.chunks_exact(bt).enumerate() {
        let expected_or_read = match &blocks[i] {
            Some(id) => {
                let mut resp = engine.node.client.get(&format!("/v1/blocks/{id}"))?;
                let local = resp
                    .headers()
                    .get("kvfabric-source")
                    .and_then(|v| v.to_str().ok())
                    == Some("local");
                let got = read_body(&mut resp)?;
                if local {
                    out.hits_local += 1;
                } else {
                    out.hits_remote += 1;
                    out.bytes_fetched += got.len() as u64;
                }
                Some(got)
            }
            None => None,
        };
        match expected_or_read {
            Some(got) => {
                first.get_or_insert(start.elapsed());
                out.mismatches += u64::from(got != engine_block(g, chunk));
            }
            None => {
                std::thread::sleep(engine.prefill_time(bt as u64));
                let bytes = engine_block(g, chunk);
                first.get_or_insert(start.elapsed());
                out.recomputed_tokens += bt as u64;
                let headers = [
                    ("kvfabric-model", g.name.clone()),
                    ("kvfabric-tokens", bt.to_string()),
                    ("kvfabric-chunk-key", prefix[i].to_hex()),
                    ("kvfabric-chunk-key-independent", independent[i].to_hex()),
                ];
                let mut resp = engine.node.client.put("/v1/blocks", &headers, &bytes)?;
                let v = read_json(&mut resp)?;
                v.get("block")
                    .and_then(Value::as_str)
                    .with_context(|| format!("put answer without a block id: {v}"))?;
            }
        }
    }
    let tail = tokens.len() % bt;
    if tail > 0 {
        std::thread::sleep(engine.prefill_time(tail as u64));
        first.get_or_insert(start.elapsed());
        out.recomputed_tokens += tail as u64;
    }
    out.time_to_first_block_ms = ms(first.unwrap_or_else(|| start.elapsed()));
    out.total_ms = ms(start.elapsed());
    Ok(out)
}
