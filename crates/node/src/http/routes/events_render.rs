//! The JSON `data` of each Server-Sent Event of `GET /v1/events` (docs/API.md "KV events").
//!
//! `stored` and `removed` carry the block ids, the tier, and the hashes the ZeroMQ wire
//! publishes them under (`hashes`, 64-bit integers, `kvfabric_core::events::wire`);
//! `stored` also the token count and, for a block put by an engine, its identity (`engine`).
//! The engine's token ids are tenant data: they are shown only to a caller whose own
//! namespace the block is in (a reader of a shared namespace sees the rest of the record).

use kvfabric_core::events::wire::hashes;
use kvfabric_core::events::{Batch, EngineBlock, EventKind};
use kvfabric_core::NodeId;
use kvfabric_store::NamespaceKey;
use serde_json::{json, Value};

/// The engine record as shown, token ids only for `owner`s.
fn engine(e: &EngineBlock, show_tokens: bool) -> Value {
    let mut v = json!({
        "engine": e.engine,
        "block_hashes": e.page_hashes.iter().map(|h| h.display()).collect::<Vec<_>>(),
        "parent_block_hash": e.parent.as_ref().map(|h| h.display()),
        "page_tokens": e.page_tokens,
        "lora_id": e.lora_id,
        "lora_name": e.lora_name,
        "group_idx": e.group_idx,
        "kv_cache_spec_kind": e.kv_cache_spec_kind,
    });
    if show_tokens {
        v["token_ids"] = json!(e.token_ids);
    }
    v
}

/// The SSE event name and data of `e`, an event of `node`'s `batch`; `own` is the caller's
/// own namespace under every readable secret (`None`: an operator-level reader that sees token ids everywhere).
pub(super) fn render(
    e: &EventKind,
    node: NodeId,
    batch: &Batch,
    own: Option<&[NamespaceKey]>,
) -> (&'static str, Value) {
    let mut data = json!({
        "node": node.to_string(), "epoch": batch.epoch, "seq": batch.seq, "ts": batch.ts,
    });
    let name = match e {
        EventKind::Epoch => "epoch",
        EventKind::Stored {
            namespace,
            tier,
            ids,
            chunk_key,
            info,
        } => {
            let eng = info.engine.as_deref();
            data["tier"] = json!(tier.name());
            data["blocks"] = json!(ids.iter().map(|i| i.to_hex()).collect::<Vec<_>>());
            data["hashes"] = json!(hashes(ids, eng));
            data["chunk_key"] = json!(chunk_key.map(|k| k.to_hex()));
            data["block_tokens"] = json!(info.block_tokens);
            data["engine"] = eng.map_or(Value::Null, |x| {
                engine(x, own.is_none_or(|o| o.contains(namespace)))
            });
            "stored"
        }
        EventKind::Removed {
            tier,
            ids,
            engine: eng,
            ..
        } => {
            data["tier"] = json!(tier.map(|t| t.name()));
            data["blocks"] = json!(ids.iter().map(|i| i.to_hex()).collect::<Vec<_>>());
            data["hashes"] = json!(hashes(ids, eng.as_deref()));
            "removed"
        }
        EventKind::NodeDown { node: down, epoch } => {
            data["down"] = json!(down.to_string());
            data["down_epoch"] = json!(epoch);
            "node_down"
        }
    };
    (name, data)
}
