//! Unit tests of the event log: gap-free sequence numbers, the bounded ring, replay and the
//! vLLM wire encoding.

use kvfabric_store::{BlockId, NamespaceKey, Tier};
use rmpv::Value;

use super::*;

fn stored(n: u8) -> EventKind {
    stored_in("a", n)
}

fn log(capacity: usize) -> EventLog {
    EventLog::new(NodeId(1), 7, capacity, EventMetrics::default())
}

#[test]
fn sequence_numbers_have_no_gaps_and_the_ring_keeps_the_newest() {
    let l = log(3);
    assert_eq!(l.publish(Vec::new()), None);
    for i in 0..5u8 {
        assert_eq!(l.publish(vec![stored(i)]), Some(u64::from(i)));
    }
    let kept: Vec<u64> = l.buffered_from(0).iter().map(|b| b.seq).collect();
    assert_eq!(kept, vec![2, 3, 4]);
    assert_eq!(l.next_seq(), 5);
    assert_eq!(l.metrics.published.get(), 5);
    assert!(l.buffered_from(0).iter().all(|b| b.epoch == 7));
}

#[test]
fn subscribe_replays_from_since_then_follows_live() {
    let l = log(4);
    for i in 0..3u8 {
        l.publish(vec![stored(i)]);
    }
    let mut sub = l.subscribe(Some(1)).unwrap();
    let seqs: Vec<u64> = sub.replay.iter().map(|b| b.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    l.publish(vec![stored(9)]);
    assert_eq!(sub.live.try_recv().unwrap().seq, 3);
    for i in 0..4u8 {
        l.publish(vec![stored(i)]);
    }
    // seq 0..3 are gone from a ring of 4 (4..7 remain).
    assert_eq!(l.subscribe(Some(2)).err(), Some(ReplayGap { oldest: 4 }));
    assert!(l.subscribe(Some(4)).is_ok());
    // A `since` in the future replays nothing and waits.
    assert!(l.subscribe(Some(100)).unwrap().replay.is_empty());
    // Live only: the stream expects the next batch published, not seq 0 (which would read
    // the first live batch as a gap).
    let mut live = l.subscribe(None).unwrap();
    assert!(live.replay.is_empty());
    assert_eq!(live.next, 8);
    l.publish(vec![stored(1)]);
    assert_eq!(live.live.try_recv().unwrap().seq, live.next);
    assert_eq!(l.subscribe(Some(5)).unwrap().next, 5);
}

#[test]
fn close_ends_subscriptions() {
    let l = log(2);
    let sub = l.subscribe(None).unwrap();
    assert!(!*sub.closed.borrow());
    l.close();
    assert!(*sub.closed.borrow());
}

fn field<'a>(event: &'a Value, name: &str) -> Option<&'a Value> {
    event
        .as_map()
        .expect("an event is a map")
        .iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

fn keys(event: &Value) -> Vec<&str> {
    event
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect()
}

#[test]
fn the_payload_is_a_vllm_0_33_kv_event_batch_of_tagged_maps() {
    let l = log(2);
    let id = BlockId([5; 32]);
    let engine = Arc::new(EngineBlock {
        engine: "vllm/0.33.0".into(),
        page_hashes: vec![EngineHash::Int(11), EngineHash::Bytes(vec![0, 0, 1, 2])],
        parent: Some(EngineHash::Int(u64::MAX)),
        page_tokens: 32,
        token_ids: (0..64).collect(),
        lora_id: Some(3),
        lora_name: Some("adapter".into()),
        group_idx: Some(1),
        kv_cache_spec_kind: Some("mla_attention".into()),
    });
    l.publish(vec![
        EventKind::Epoch,
        stored(5),
        EventKind::Stored {
            namespace: NamespaceKey::derive("a"),
            tier: Tier::Gpu,
            ids: vec![id],
            chunk_key: None,
            info: BlockInfo {
                block_tokens: 64,
                engine: Some(engine.clone()),
            },
        },
        EventKind::Removed {
            namespace: NamespaceKey::derive("a"),
            tier: Some(Tier::Disk),
            ids: vec![id],
            engine: Some(engine),
        },
        EventKind::Removed {
            namespace: NamespaceKey::derive("a"),
            tier: None,
            ids: vec![id],
            engine: None,
        },
        EventKind::NodeDown {
            node: NodeId(3),
            epoch: 2,
        },
        EventKind::NodeDown {
            node: NodeId(1),
            epoch: 4,
        },
    ]);
    let b = &l.buffered_from(0)[0];
    let v = rmpv::decode::read_value(&mut &b.payload[..]).unwrap();
    let Value::Array(batch) = v else {
        panic!("not an array: {v:?}")
    };
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[0].as_f64(), Some(b.ts));
    assert_eq!(batch[2], Value::from(0));
    let events = batch[1].as_array().unwrap();
    // NodeDown of another node has no event; of the stream's own node it clears it.
    assert_eq!(events.len(), 6);
    assert_eq!(keys(&events[0]), ["type"]);
    assert_eq!(
        field(&events[0], "type"),
        Some(&Value::from("AllBlocksCleared"))
    );
    // Without an engine identity: one hash from the id, the block's token count, no tokens.
    assert_eq!(
        keys(&events[1]),
        [
            "type",
            "block_hashes",
            "parent_block_hash",
            "token_ids",
            "block_size",
            "lora_id",
            "medium",
            "lora_name",
            "group_idx",
            "locality"
        ]
    );
    let fallback = u64::from_be_bytes([5; 8]);
    assert_eq!(
        field(&events[1], "block_hashes"),
        Some(&Value::Array(vec![Value::from(fallback)]))
    );
    assert_eq!(field(&events[1], "block_size"), Some(&Value::from(64)));
    assert_eq!(field(&events[1], "token_ids"), Some(&Value::Array(vec![])));
    assert_eq!(field(&events[1], "medium"), Some(&Value::from("CPU")));
    assert_eq!(field(&events[1], "locality"), Some(&Value::from("LOCAL")));
    assert_eq!(field(&events[1], "parent_block_hash"), Some(&Value::Nil));
    // With one: the engine's hashes, parent, tokens, LoRA, group and kind; tokens per hash.
    let e = &events[2];
    assert_eq!(
        field(e, "block_hashes"),
        Some(&Value::Array(vec![Value::from(11), Value::from(0x0102)]))
    );
    assert_eq!(field(e, "parent_block_hash"), Some(&Value::from(u64::MAX)));
    assert_eq!(field(e, "block_size"), Some(&Value::from(32)));
    assert_eq!(field(e, "token_ids").unwrap().as_array().unwrap().len(), 64);
    assert_eq!(field(e, "lora_id"), Some(&Value::from(3)));
    assert_eq!(field(e, "lora_name"), Some(&Value::from("adapter")));
    assert_eq!(field(e, "group_idx"), Some(&Value::from(1)));
    assert_eq!(
        field(e, "kv_cache_spec_kind"),
        Some(&Value::from("mla_attention"))
    );
    assert_eq!(field(e, "medium"), Some(&Value::from("GPU")));
    // Removals name the hashes the store named.
    assert_eq!(
        keys(&events[3]),
        ["type", "block_hashes", "medium", "group_idx", "locality"]
    );
    assert_eq!(field(&events[3], "block_hashes"), field(e, "block_hashes"));
    assert_eq!(field(&events[3], "medium"), Some(&Value::from("STORAGE")));
    assert_eq!(field(&events[4], "medium"), Some(&Value::Nil));
    assert_eq!(
        field(&events[4], "block_hashes"),
        Some(&Value::Array(vec![Value::from(fallback)]))
    );
    assert_eq!(
        field(&events[5], "type"),
        Some(&Value::from("AllBlocksCleared"))
    );
}

#[test]
fn a_live_subscription_starts_at_the_next_sequence_number() {
    let l = log(4);
    for i in 0..3u8 {
        l.publish(vec![stored(i)]);
    }
    let mut sub = l.subscribe(None).unwrap();
    assert_eq!(sub.next, 3);
    assert!(sub.replay.is_empty());
    l.publish(vec![stored(7)]);
    assert_eq!(sub.live.try_recv().unwrap().seq, sub.next);
    assert_eq!(l.subscribe(Some(1)).unwrap().next, 1);
}

fn stored_in(ns: &str, n: u8) -> EventKind {
    EventKind::Stored {
        namespace: NamespaceKey::derive(ns),
        tier: Tier::Host,
        ids: vec![BlockId([n; 32])],
        chunk_key: None,
        info: BlockInfo::tokens(64),
    }
}

#[test]
fn a_batch_of_several_namespaces_is_published_as_one_per_namespace() {
    let l = log(16);
    let mixed = vec![stored_in("a", 1), stored_in("b", 2), stored_in("a", 3)];
    assert_eq!(l.publish(mixed), Some(1), "two batches, the last is seq 1");
    let [first, second] = &l.buffered_from(0)[..] else {
        panic!("two batches")
    };
    assert_eq!(first.class, Some(NamespaceKey::derive("a")));
    assert_eq!(first.events, [stored_in("a", 1), stored_in("a", 3)]);
    assert_eq!(second.events, [stored_in("b", 2)]);
    // An event every reader sees keeps the batch whole.
    assert_eq!(
        l.publish(vec![EventKind::Epoch, stored_in("a", 4), stored_in("b", 5)]),
        Some(2)
    );
    assert_eq!(l.buffered_from(2)[0].class, None);
}

#[test]
fn a_tenants_positions_count_only_the_batches_it_sees() {
    let (a, b) = (NamespaceKey::derive("a"), NamespaceKey::derive("b"));
    let l = log(8);
    l.publish(vec![EventKind::Epoch]);
    for i in 0..6u8 {
        // Two of a's batches for each of b's: b's positions are 1, 2, 3 however many a has.
        l.publish(vec![stored_in("a", i)]);
        l.publish(vec![stored_in("a", i + 100)]);
        l.publish(vec![stored_in("b", i)]);
    }
    let all = l.buffered_from(0);
    let b_view: Vec<u64> = all.iter().filter_map(|x| x.view_seq(&[b])).collect();
    let a_view: Vec<u64> = all.iter().filter_map(|x| x.view_seq(&[a])).collect();
    // The ring keeps the last 8 of 19: seq 11..18.
    assert_eq!(b_view, [4, 5, 6]);
    assert_eq!(a_view, [8, 9, 10, 11, 12]);
    assert_eq!(
        all[0].view_seq(&[a, b]),
        Some(11),
        "a reader of both counts both"
    );
    // Resuming from a view position starts at the first batch seen at or after it.
    let sub = l.subscribe_view(&[b], Some(5)).unwrap();
    let seqs: Vec<Option<u64>> = sub.replay.iter().map(|x| x.view_seq(&[b])).collect();
    assert_eq!(seqs.into_iter().flatten().collect::<Vec<_>>(), [5, 6]);
    assert_eq!(sub.next, 15, "b's position 5 is the log's batch 15");
    // Older than what is buffered: the gap names b's oldest position still there.
    assert_eq!(l.oldest_view(&[b]), 4);
    assert_eq!(
        l.subscribe_view(&[b], Some(3)).err(),
        Some(ReplayGap { oldest: 4 })
    );
    // Ahead of the view: nothing replayed, the next batch published is where it starts.
    let ahead = l.subscribe_view(&[b], Some(7)).unwrap();
    assert!(ahead.replay.is_empty());
    assert_eq!(ahead.next, l.next_seq());
}
