//! Unit tests of the event log: gap-free sequence numbers, the bounded ring, replay and the
//! vLLM wire encoding.

use kvfabric_store::{BlockId, NamespaceKey, Tier};
use rmpv::Value;

use super::*;

fn stored(n: u8) -> EventKind {
    EventKind::Stored {
        namespace: NamespaceKey::derive("a"),
        tier: Tier::Host,
        ids: vec![BlockId([n; 32])],
        chunk_key: None,
        block_tokens: 64,
    }
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

#[test]
fn the_payload_is_a_vllm_kv_event_batch() {
    let l = log(2);
    let id = BlockId([5; 32]);
    l.publish(vec![
        EventKind::Epoch,
        stored(5),
        EventKind::Removed {
            namespace: NamespaceKey::derive("a"),
            tier: Some(Tier::Disk),
            ids: vec![id],
        },
        EventKind::Removed {
            namespace: NamespaceKey::derive("a"),
            tier: None,
            ids: vec![id],
        },
    ]);
    let b = &l.buffered_from(0)[0];
    let v = rmpv::decode::read_value(&mut &b.payload[..]).unwrap();
    let Value::Array(batch) = v else {
        panic!("not an array: {v:?}")
    };
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[0].as_f64(), Some(b.ts));
    assert_eq!(batch[2], Value::Nil);
    let events = batch[1].as_array().unwrap();
    assert_eq!(
        events[0],
        Value::Array(vec![Value::from("AllBlocksCleared")])
    );
    assert_eq!(
        events[1],
        Value::Array(vec![
            Value::from("BlockStored"),
            Value::Array(vec![Value::Binary(vec![5; 32])]),
            Value::Nil,
            Value::Array(vec![]),
            Value::from(64),
            Value::Nil,
            Value::from("CPU"),
        ])
    );
    assert_eq!(
        events[2],
        Value::Array(vec![
            Value::from("BlockRemoved"),
            Value::Array(vec![Value::Binary(vec![5; 32])]),
            Value::from("DISK"),
        ])
    );
    assert_eq!(events[3].as_array().unwrap()[2], Value::Nil);
}
