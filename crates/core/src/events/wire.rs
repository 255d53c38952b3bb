//! The vLLM KV-event wire format (msgpack) exactly as vLLM 0.33.0 emits it
//! (`vllm/distributed/kv_events.py`): `KVEventBatch` is an `array_like` struct, its events
//! are tagged `msgspec` structs encoded as maps (`{"type": "BlockStored", ...}`), fields in
//! declaration order, required fields always present, defaulted ones left out when unset
//! (`omit_defaults=True`):
//!
//! - batch: `[ts: float64, [event, …], data_parallel_rank: 0]`;
//! - `BlockStored`: `type`, `block_hashes`, `parent_block_hash`, `token_ids`, `block_size`,
//!   `lora_id`, `medium`, `lora_name`, then `group_idx`, `kv_cache_spec_kind` (when known),
//!   `locality`;
//! - `BlockRemoved`: `type`, `block_hashes`, `medium`, `group_idx`, `locality`;
//! - `AllBlocksCleared`: `type`.
//!
//! What kvfabric puts in them: a block put with an engine identity ([`EngineBlock`]) is
//! published under the engine's page hashes, its parent hash, token ids, LoRA and group, with
//! `block_size` = the engine's page tokens (tokens per hash, as vLLM's own offloading
//! connector publishes multi-page blocks); any other block under one hash derived from its id
//! ([`fallback_hash`]) with `block_size` = the block's token count and no token ids. Hashes
//! are 64-bit integers (vLLM's default `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`; bytes hashes
//! are converted as vLLM converts them). `medium` is `GPU`, `CPU` (host) or `STORAGE` (disk),
//! nil on a removal whose tier is unknown; `locality` is always `LOCAL` (a node publishes
//! what it holds itself). [`EventKind::NodeDown`] of the stream's own node is an
//! `AllBlocksCleared` (the cluster feed publishes it for a member whose lease expired); of
//! another node it has no event.

use bytes::Bytes;
use kvfabric_store::{BlockId, Tier};
use rmpv::Value;

use super::engine::low_u64_be;
use super::{BlockInfo, EngineBlock, EventKind};
use crate::ids::NodeId;

/// The `data_parallel_rank` of every batch (vLLM's publisher fills in its rank; a node is one
/// rank).
pub const DATA_PARALLEL_RANK: u64 = 0;
/// The `locality` of every event.
pub const LOCALITY: &str = "LOCAL";

/// The `medium` string of a tier (vLLM's `MEDIUM_GPU`, `MEDIUM_CPU`, `MEDIUM_STORAGE`).
pub fn medium(tier: Tier) -> &'static str {
    match tier {
        Tier::Gpu => "GPU",
        Tier::Host => "CPU",
        Tier::Disk => "STORAGE",
    }
}

/// The hash a block put without an engine identity is published under: the low 64 bits of
/// its id read big-endian (what vLLM's int conversion makes of a 32-byte hash).
pub fn fallback_hash(id: &BlockId) -> u64 {
    low_u64_be(&id.0)
}

/// The 64-bit hashes a block (or blocks) is published under.
pub fn hashes(ids: &[BlockId], engine: Option<&EngineBlock>) -> Vec<u64> {
    match engine {
        Some(e) => e.page_hashes.iter().map(|h| h.wire()).collect(),
        None => ids.iter().map(fallback_hash).collect(),
    }
}

fn map(fields: Vec<(&'static str, Value)>) -> Value {
    Value::Map(
        fields
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

fn ints(v: &[u64]) -> Value {
    Value::Array(v.iter().map(|x| Value::from(*x)).collect())
}

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map_or(Value::Nil, Into::into)
}

fn stored(tier: Tier, ids: &[BlockId], info: &BlockInfo) -> Value {
    let e = info.engine.as_deref();
    let block_size = e.map_or(info.block_tokens, |e| e.page_tokens);
    let tokens = e.map_or(Value::Array(Vec::new()), |e| {
        Value::Array(e.token_ids.iter().map(|t| Value::from(*t)).collect())
    });
    let mut f = vec![
        ("type", Value::from("BlockStored")),
        ("block_hashes", ints(&hashes(ids, e))),
        (
            "parent_block_hash",
            opt(e.and_then(|e| e.parent.as_ref()).map(|h| h.wire())),
        ),
        ("token_ids", tokens),
        ("block_size", Value::from(block_size)),
        ("lora_id", opt(e.and_then(|e| e.lora_id))),
        ("medium", Value::from(medium(tier))),
        ("lora_name", opt(e.and_then(|e| e.lora_name.clone()))),
        (
            "group_idx",
            Value::from(e.and_then(|e| e.group_idx).unwrap_or(0)),
        ),
    ];
    if let Some(k) = e.and_then(|e| e.kv_cache_spec_kind.clone()) {
        f.push(("kv_cache_spec_kind", Value::from(k)));
    }
    f.push(("locality", Value::from(LOCALITY)));
    map(f)
}

/// The wire event of `e` in `origin`'s stream; `None` for what has no vLLM event there.
fn event(e: &EventKind, origin: NodeId) -> Option<Value> {
    Some(match e {
        EventKind::NodeDown { node, .. } if *node == origin => {
            map(vec![("type", Value::from("AllBlocksCleared"))])
        }
        EventKind::NodeDown { .. } => return None,
        EventKind::Epoch => map(vec![("type", Value::from("AllBlocksCleared"))]),
        EventKind::Stored {
            tier, ids, info, ..
        } => stored(*tier, ids, info),
        EventKind::Removed {
            tier, ids, engine, ..
        } => map(vec![
            ("type", Value::from("BlockRemoved")),
            ("block_hashes", ints(&hashes(ids, engine.as_deref()))),
            ("medium", opt(tier.map(medium))),
            (
                "group_idx",
                Value::from(engine.as_deref().and_then(|e| e.group_idx).unwrap_or(0)),
            ),
            ("locality", Value::from(LOCALITY)),
        ]),
    })
}

/// The msgpack `KVEventBatch` of `events` published at `ts` in `origin`'s stream.
pub fn encode_batch(ts: f64, events: &[EventKind], origin: NodeId) -> Bytes {
    let batch = Value::Array(vec![
        Value::F64(ts),
        Value::Array(events.iter().filter_map(|e| event(e, origin)).collect()),
        Value::from(DATA_PARALLEL_RANK),
    ]);
    let mut out = Vec::with_capacity(128 + 160 * events.len());
    rmpv::encode::write_value(&mut out, &batch).expect("writing to a Vec cannot fail");
    Bytes::from(out)
}
