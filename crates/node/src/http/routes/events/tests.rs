//! The stream without HTTP: ordering, gaps, live starts, tenancy.

use kvfabric_core::events::{BlockInfo, EngineBlock, EngineHash, EventKind, EventMetrics};
use kvfabric_store::{BlockId, Tier};
use tokio::sync::Semaphore;

use super::*;

fn stream(log: &Arc<EventLog>, read: Vec<NamespaceKey>, since: u64) -> Stream {
    stream_from(log, read, Some(since))
}

fn stream_from(log: &Arc<EventLog>, read: Vec<NamespaceKey>, since: Option<u64>) -> Stream {
    // A tenant's stream (`own` is its first namespace): positions of its view.
    let sub = log.subscribe_view(&read, since).unwrap();
    let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
    log.metrics.subscribers.inc();
    let me = log.node();
    Stream {
        source: Source::Node(log.clone(), sub.live),
        epoch: log.epoch(),
        me,
        own: read.first().map(|k| vec![*k]),
        read,
        next: sub.next,
        view_next: since.unwrap_or(0),
        replay: sub.replay.into_iter().map(|b| node_item(me, b)).collect(),
        closed: sub.closed,
        pending: VecDeque::new(),
        ended: false,
        gaps: log.metrics.gaps.clone(),
        _slot: Slot {
            _permit: permit,
            gauge: log.metrics.subscribers.clone(),
        },
    }
}

fn stored(ns: &str, n: u8) -> EventKind {
    EventKind::Stored {
        namespace: NamespaceKey::derive(ns),
        tier: Tier::Host,
        ids: vec![BlockId([n; 32])],
        chunk_key: None,
        info: BlockInfo::tokens(64),
    }
}

/// The SSE text of one message.
async fn text(e: Event) -> String {
    let body = Sse::new(stream::iter([Ok::<_, Infallible>(e)])).into_response();
    let bytes = axum::body::to_bytes(body.into_body(), 1 << 20)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_stream_lagging_beyond_the_ring_gets_one_replay_gap_and_ends() {
    let log = Arc::new(EventLog::new(NodeId(1), 3, 2, EventMetrics::default()));
    log.publish(vec![EventKind::Epoch]);
    let mut s = stream(&log, vec![NamespaceKey::derive("a")], 0);
    assert_eq!(log.metrics.subscribers.get(), 1);
    // The replayed epoch, then five more batches into a ring (and broadcast) of two.
    for i in 0..5 {
        log.publish(vec![stored("a", i)]);
    }
    let first = text(s.next_event().await.unwrap()).await;
    assert!(
        first.contains("event: epoch") && first.contains("id: 3:0"),
        "{first}"
    );
    let gap = text(s.next_event().await.unwrap()).await;
    assert!(gap.contains("event: replay_gap"), "{gap}");
    assert!(
        gap.contains("\"since\":1") && gap.contains("\"oldest\":4"),
        "{gap}"
    );
    assert!(
        s.next_event().await.is_none(),
        "the stream ends after the gap"
    );
    assert_eq!(log.metrics.gaps.get(), 1);
    drop(s);
    assert_eq!(log.metrics.subscribers.get(), 0);
}

#[tokio::test]
async fn a_stream_behind_the_broadcast_but_within_the_ring_catches_up_without_a_gap() {
    let n = kvfabric_core::events::BROADCAST_MAX as u64 + 500;
    let log = Arc::new(EventLog::new(
        NodeId(1),
        1,
        n as usize + 10,
        EventMetrics::default(),
    ));
    log.publish(vec![EventKind::Epoch]);
    let mut s = stream(&log, vec![NamespaceKey::derive("a")], 0);
    for i in 0..n {
        log.publish(vec![stored("a", (i % 251) as u8)]);
    }
    for seq in 0..=n {
        let e = text(s.next_event().await.unwrap()).await;
        assert!(e.contains(&format!("id: 1:{seq}\n")), "{seq}: {e}");
    }
    assert_eq!(log.metrics.gaps.get(), 0);
}

#[tokio::test]
async fn only_readable_namespaces_are_rendered_and_the_batch_id_goes_last() {
    let log = Arc::new(EventLog::new(NodeId(1), 1, 8, EventMetrics::default()));
    log.publish(vec![stored("a", 1), stored("b", 2), stored("a", 3)]);
    log.publish(vec![stored("b", 4)]);
    log.publish(vec![stored("a", 5)]);
    let mut s = stream(&log, vec![NamespaceKey::derive("a")], 0);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(text(s.next_event().await.unwrap()).await);
    }
    assert!(got[0].contains(&BlockId([1; 32]).to_hex()) && !got[0].contains("id:"));
    assert!(got[1].contains(&BlockId([3; 32]).to_hex()) && got[1].contains("id: 1:0"));
    // The first publish was split by namespace (b's event is batch 1); batches 1 and 2 are
    // b's: neither shown nor counted, so batch 3 is a's position 1.
    assert!(got[2].contains(&BlockId([5; 32]).to_hex()) && got[2].contains("id: 1:1"));
    assert!(got[2].contains("\"seq\":1"), "{}", got[2]);
    log.close();
    assert!(
        s.next_event().await.is_none(),
        "a closed log ends the stream"
    );
}

#[tokio::test]
async fn a_live_stream_without_since_gets_the_next_batches_and_no_false_gap() {
    let log = Arc::new(EventLog::new(NodeId(1), 2, 8, EventMetrics::default()));
    for i in 0..3 {
        log.publish(vec![stored("a", i)]);
    }
    let mut s = stream_from(&log, vec![NamespaceKey::derive("a")], None);
    log.publish(vec![stored("a", 7)]);
    log.publish(vec![stored("a", 8)]);
    for seq in [3, 4] {
        let e = text(s.next_event().await.unwrap()).await;
        assert!(
            e.contains("event: stored") && e.contains(&format!("id: 2:{seq}\n")),
            "{e}"
        );
    }
    assert_eq!(log.metrics.gaps.get(), 0);
}

#[tokio::test]
async fn token_ids_are_shown_to_the_block_namespace_only() {
    let log = Arc::new(EventLog::new(NodeId(1), 1, 8, EventMetrics::default()));
    let engine = Arc::new(EngineBlock {
        engine: "vllm/0.33.0".into(),
        page_hashes: vec![EngineHash::Int(42)],
        parent: None,
        page_tokens: 64,
        token_ids: vec![4242; 64],
        lora_id: None,
        lora_name: None,
        group_idx: Some(0),
        kv_cache_spec_kind: Some("mla_attention".into()),
    });
    let docs = NamespaceKey::derive("docs");
    log.publish(vec![EventKind::Stored {
        namespace: docs,
        tier: Tier::Host,
        ids: vec![BlockId([1; 32])],
        chunk_key: None,
        info: BlockInfo {
            block_tokens: 64,
            engine: Some(engine),
        },
    }]);
    let mut owner = stream(&log, vec![docs], 0);
    let mut reader = stream(&log, vec![NamespaceKey::derive("a"), docs], 0);
    let o = text(owner.next_event().await.unwrap()).await;
    let r = text(reader.next_event().await.unwrap()).await;
    assert!(
        o.contains("\"token_ids\":[4242") && o.contains("\"hashes\":[42]"),
        "{o}"
    );
    assert!(
        !r.contains("token_ids") && r.contains("\"block_hashes\":[42]"),
        "{r}"
    );
}

/// Fuzz finding (`event_resume`, kept in `fuzz/regressions/event_resume`): a `#` ends the
/// query, and what follows it is a fragment the query decoder never sees; the property's model
/// had read the whole line as the query.
#[test]
fn a_fragment_is_not_part_of_the_query() {
    let uri: Uri = "/v1/events?since=5#scope=bogus".parse().unwrap();
    assert_eq!(query(&uri).unwrap(), (Some(5), Scope::Node));
    let uri: Uri = "/v1/events?#since=x".parse().unwrap();
    assert_eq!(query(&uri).unwrap(), (None, Scope::Node));
    let uri: Uri = "/v1/events?scope=cluster&since=x#".parse().unwrap();
    assert!(query(&uri).is_err());
}
