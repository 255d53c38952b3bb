//! The vLLM KV-event wire format (msgpack), as vLLM's `vllm/distributed/kv_events.py` emits
//! it with `msgspec` `array_like` structs and tagged events:
//!
//! - a batch is `[ts: float64, events: [event, …], data_parallel_rank: nil]`;
//! - `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]`;
//! - `["BlockRemoved", block_hashes, medium]`;
//! - `["AllBlocksCleared"]`.
//!
//! What kvfabric puts in the fields: `block_hashes` are the 32-byte block ids as msgpack
//! `bin` (vLLM's `ExternalBlockHash` is `bytes | int`); `parent_block_hash` and `lora_id` are
//! nil, `token_ids` is empty (a block store does not know the tokens); `block_size` is the
//! model's tokens per block when known, else 0; `medium` is `GPU`, `CPU` (the host tier) or
//! `DISK` (nil on a removal whose tier is unknown). A node's [`EventKind::Epoch`] is an
//! `AllBlocksCleared`; an [`EventKind::NodeDown`] has no vLLM event and is left out (its batch
//! may then be empty: `[ts, [], nil]`).

use bytes::Bytes;
use kvfabric_store::Tier;
use rmpv::Value;

use super::EventKind;

/// The `medium` string of a tier.
pub fn medium(tier: Tier) -> &'static str {
    match tier {
        Tier::Gpu => "GPU",
        Tier::Host => "CPU",
        Tier::Disk => "DISK",
    }
}

/// The wire event of `e`; `None` for what vLLM has no event for ([`EventKind::NodeDown`]).
fn event(e: &EventKind) -> Option<Value> {
    let hashes = |ids: &[kvfabric_store::BlockId]| {
        Value::Array(ids.iter().map(|id| Value::Binary(id.0.to_vec())).collect())
    };
    Some(match e {
        EventKind::NodeDown { .. } => return None,
        EventKind::Epoch => Value::Array(vec![Value::from("AllBlocksCleared")]),
        EventKind::Stored {
            tier,
            ids,
            block_tokens,
            ..
        } => Value::Array(vec![
            Value::from("BlockStored"),
            hashes(ids),
            Value::Nil,
            Value::Array(Vec::new()),
            Value::from(*block_tokens),
            Value::Nil,
            Value::from(medium(*tier)),
        ]),
        EventKind::Removed { tier, ids, .. } => Value::Array(vec![
            Value::from("BlockRemoved"),
            hashes(ids),
            tier.map_or(Value::Nil, |t| Value::from(medium(t))),
        ]),
    })
}

/// The msgpack `KVEventBatch` of `events` published at `ts`.
pub fn encode_batch(ts: f64, events: &[EventKind]) -> Bytes {
    let batch = Value::Array(vec![
        Value::F64(ts),
        Value::Array(events.iter().filter_map(event).collect()),
        Value::Nil,
    ]);
    let mut out = Vec::with_capacity(64 + 40 * events.len());
    rmpv::encode::write_value(&mut out, &batch).expect("writing to a Vec cannot fail");
    Bytes::from(out)
}
