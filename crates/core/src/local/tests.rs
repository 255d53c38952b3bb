//! The local side without HTTP: puts through reservations, holding, namespaces, deletes,
//! chunk keys and recovery; reads served from pinned views; room made by demotion, or waited
//! for, under concurrent puts.

use std::sync::Arc;

use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{
    BlockId, ByteCount, Dedup, ModelGeometry, NamespaceKey, PutForm, StoreConfig, StoreError, Tier,
    VerifiedBlock, HEADER_LEN,
};

use super::*;

use kvfabric_test_support::presets::tiny;

mod gpu;

fn payload(g: &ModelGeometry, seed: u8) -> Vec<u8> {
    let len = g.block_layout().payload_len as usize;
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

async fn put(
    node: &LocalNode,
    ns: NamespaceKey,
    g: &ModelGeometry,
    bytes: &[u8],
    key: Option<ChunkKey>,
) -> put::Sealed {
    try_put(node, ns, g, bytes, key).await.unwrap()
}

async fn try_put(
    node: &LocalNode,
    ns: NamespaceKey,
    g: &ModelGeometry,
    bytes: &[u8],
    key: Option<ChunkKey>,
) -> Result<put::Sealed, PutError> {
    let mut s = PutSession::begin(node, ns, g, PutForm::Canonical).await?;
    for piece in bytes.chunks(1000) {
        s.write(piece)?;
    }
    s.seal(key.as_slice(), BlockInfo::tokens(g.block_tokens()))
}

/// The payload `node` serves for `id` under `read`, and from which tier.
fn read_back(
    node: &Arc<LocalNode>,
    read: &[NamespaceKey],
    id: &BlockId,
) -> Option<(Vec<u8>, Tier)> {
    let r = node.read(read, id).unwrap()?;
    Some((r.bytes[HEADER_LEN..].to_vec(), r.tier))
}

fn open(config: StoreConfig, namespaces: &[NamespaceKey]) -> Arc<LocalNode> {
    Arc::new(LocalNode::open(config, namespaces).unwrap().0)
}

fn block_bytes(g: &ModelGeometry) -> u64 {
    g.block_layout().payload_len + HEADER_LEN as u64
}

/// A host tier with room for one block of `g` (each put demotes the previous one to disk) and
/// a 1 MiB disk tier in `dir`.
fn one_block_then_disk(g: &ModelGeometry, dir: &tempfile::TempDir) -> StoreConfig {
    StoreConfig {
        disk: Some(DiskConfig::new(dir.path().join("disk"), ByteCount(1 << 20))),
        ..StoreConfig::host_only(ByteCount(block_bytes(g)))
    }
}

fn host_used(node: &LocalNode) -> u64 {
    let s = node.snapshot().unwrap();
    s.usage
        .iter()
        .find(|u| u.tier == Tier::Host)
        .unwrap()
        .used
        .0
}

#[tokio::test]
async fn a_put_is_held_once_read_back_and_released_by_delete() {
    let g = tiny();
    let (a, b) = (NamespaceKey::derive("a"), NamespaceKey::derive("b"));
    let node = open(StoreConfig::host_only(ByteCount(1 << 20)), &[a, b]);
    let p = payload(&g, 1);
    let key = ChunkKey([7; 32]);
    let first = put(&node, a, &g, &p, Some(key)).await;
    assert_eq!(first.dedup, Dedup::New);
    let again = put(&node, a, &g, &p, None).await;
    assert_eq!((again.id, again.dedup), (first.id, Dedup::Shared));
    node.with(|l| {
        let slot = l.store.slots_of(&first.id, &a)[0];
        assert_eq!(
            l.store.counts(slot)?,
            (1, 0),
            "the node holds one reference"
        );
        Ok(())
    })
    .unwrap();

    assert_eq!(
        read_back(&node, &[a], &first.id),
        Some((p.clone(), Tier::Host))
    );
    assert_eq!(
        node.head(&[a], &first.id).unwrap(),
        Some((Tier::Host, p.len() as u64))
    );
    assert!(
        read_back(&node, &[b], &first.id).is_none(),
        "invisible to b"
    );
    assert!(
        read_back(&node, &[b, a], &first.id).is_some(),
        "visible when a is readable"
    );
    assert_eq!(node.lookup(&[a], &[key]).unwrap(), vec![Some(first.id)]);
    assert_eq!(node.lookup(&[b], &[key]).unwrap(), vec![None]);

    assert_eq!(node.delete(&b, &[b], &first.id).unwrap(), Deleted::NotFound);
    assert_eq!(
        node.delete(&b, &[b, a], &first.id).unwrap(),
        Deleted::Forbidden
    );
    assert_eq!(node.delete(&a, &[a], &first.id).unwrap(), Deleted::Released);
    assert!(read_back(&node, &[a], &first.id).is_none());
    assert_eq!(
        node.lookup(&[a], &[key]).unwrap(),
        vec![None],
        "keys go with the block"
    );
    assert_eq!(
        host_used(&node),
        0,
        "an unreferenced deleted block is freed"
    );
    assert_eq!(node.delete(&a, &[a], &first.id).unwrap(), Deleted::NotFound);
}

#[tokio::test]
async fn a_wrong_length_or_a_dropped_session_gives_the_reservation_back() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let node = open(StoreConfig::host_only(ByteCount(1 << 20)), &[a]);
    let len = g.block_layout().payload_len;
    let begin = || PutSession::begin(&node, a, &g, PutForm::Canonical);
    let mut s = begin().await.unwrap();
    assert!(host_used(&node) > 0, "the reservation takes room");
    s.write(&vec![0; len as usize - 1]).unwrap();
    assert!(matches!(s.write(&[0, 0]), Err(PutError::Length { found, .. }) if found == len + 1));
    assert_eq!(s.written(), len - 1, "a refused piece is not written");
    assert!(matches!(
        s.seal(&[], BlockInfo::tokens(g.block_tokens())),
        Err(PutError::Length { found, .. }) if found == len - 1
    ));
    assert_eq!(host_used(&node), 0);
    let s = begin().await.unwrap();
    drop(s);
    assert_eq!(host_used(&node), 0);
}

#[tokio::test]
async fn blocks_on_disk_are_held_again_after_reopening() {
    let g = tiny();
    let dir = tempfile::tempdir().unwrap();
    let config = || one_block_then_disk(&g, &dir);
    let (a, b) = (NamespaceKey::derive("a"), NamespaceKey::derive("b"));
    let ids: Vec<_> = {
        let node = open(config(), &[a, b]);
        let mut ids = Vec::new();
        for (ns, seed) in [(a, 1), (b, 2), (a, 3)] {
            ids.push(put(&node, ns, &g, &payload(&g, seed), None).await.id);
        }
        assert!(node.snapshot().unwrap().counters.demotions >= 2);
        ids
    };
    // Reopened knowing only namespace a: b's block is released, a's first block is held; the
    // last put sat in RAM only and is gone.
    let (node, recovery) = LocalNode::open(config(), &[a]).unwrap();
    let node = Arc::new(node);
    assert_eq!((recovery.held, recovery.orphaned), (1, 1));
    assert_eq!(
        read_back(&node, &[a], &ids[0]),
        Some((payload(&g, 1), Tier::Disk))
    );
    assert!(read_back(&node, &[a], &ids[2]).is_none());
    assert!(read_back(&node, &[b], &ids[1]).is_none());
}

#[tokio::test]
async fn attaching_events_announces_the_epoch_and_what_is_held_then_publishes_changes() {
    use crate::events::{EventKind, EventLog, EventMetrics};
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let n = ANNOUNCE_IDS_MAX + 6;
    let (node, _) = LocalNode::open(StoreConfig::host_only(ByteCount(16 << 20)), &[a]).unwrap();
    let mut held = Vec::new();
    for i in 0..n {
        let mut bytes = payload(&g, 1);
        bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
        held.push(put(&node, a, &g, &bytes, None).await.id);
    }
    held.sort();
    held.dedup();
    assert_eq!(held.len(), n);

    let log = std::sync::Arc::new(EventLog::new(
        crate::ids::NodeId(1),
        4,
        16,
        EventMetrics::default(),
    ));
    node.attach_events(log.clone()).unwrap();
    let first = &log.buffered_from(0)[0];
    assert_eq!(first.seq, 0);
    assert_eq!(first.events[0], EventKind::Epoch);
    let mut announced = Vec::new();
    for e in &first.events[1..] {
        let EventKind::Stored { ids, tier, .. } = e else {
            panic!("{e:?}")
        };
        assert!(ids.len() <= ANNOUNCE_IDS_MAX);
        assert_eq!(*tier, Tier::Host);
        announced.extend_from_slice(ids);
    }
    assert_eq!(first.events.len(), 3, "1 epoch + 256 ids + the rest");
    assert_eq!(announced, held);

    // Changes after attaching are published in order, one batch each.
    let fresh = put(&node, a, &g, &payload(&g, 9), None).await.id;
    assert_eq!(node.delete(&a, &[a], &fresh).unwrap(), Deleted::Released);
    let rest: Vec<Vec<EventKind>> = log
        .buffered_from(1)
        .iter()
        .map(|b| b.events.clone())
        .collect();
    assert_eq!(
        rest,
        [
            vec![EventKind::Stored {
                namespace: a,
                tier: Tier::Host,
                ids: vec![fresh],
                chunk_key: None,
                info: BlockInfo::tokens(g.block_tokens()),
            }],
            vec![EventKind::Removed {
                namespace: a,
                tier: Some(Tier::Host),
                ids: vec![fresh],
                engine: None,
            }],
        ]
    );
}

#[tokio::test]
async fn a_served_view_keeps_its_bytes_after_a_delete_and_unpins_when_dropped() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    // Room for exactly two blocks, no disk: a pinned block cannot be evicted.
    let node = open(StoreConfig::host_only(ByteCount(2 * block_bytes(&g))), &[a]);
    let (p1, p2, p3) = (payload(&g, 1), payload(&g, 2), payload(&g, 3));
    let first = put(&node, a, &g, &p1, None).await;
    let view = node.read(&[a], &first.id).unwrap().unwrap();
    assert_eq!(node.delete(&a, &[a], &first.id).unwrap(), Deleted::Released);
    assert_eq!(
        &view.bytes[HEADER_LEN..],
        &p1[..],
        "the view outlives the delete"
    );
    put(&node, a, &g, &p2, None).await;
    // The arena is full: the unreferenced first block is pinned by the view, the second held.
    let waiting = {
        let node = Arc::clone(&node);
        let g = g.clone();
        let p3 = p3.clone();
        tokio::spawn(async move { try_put(&node, a, &g, &p3, None).await })
    };
    // The put waits (the room is held by the pin), and gets it once the view is dropped.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        !waiting.is_finished(),
        "no room while the view pins the block"
    );
    drop(view);
    let third = waiting.await.unwrap().unwrap();
    assert_eq!(read_back(&node, &[a], &third.id), Some((p3, Tier::Host)));
    assert!(read_back(&node, &[a], &first.id).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_into_a_small_host_tier_demote_or_wait_instead_of_refusing() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        disk: Some(DiskConfig::new(
            dir.path().join("disk"),
            ByteCount(64 << 20),
        )),
        // Room for two blocks: six puts in flight hold more reservations than that.
        ..StoreConfig::host_only(ByteCount(2 * block_bytes(&g)))
    };
    let node = open(config, &[a]);
    let mut tasks = tokio::task::JoinSet::new();
    for seed in 0..6u8 {
        let (node, g) = (Arc::clone(&node), g.clone());
        tasks.spawn(async move {
            let bytes = payload(&g, 40 + seed);
            // The body arrives in pieces with other work in between, as from a socket: every
            // put holds its reservation across awaits.
            let mut s = PutSession::begin(&node, a, &g, PutForm::Canonical)
                .await
                .unwrap();
            for piece in bytes.chunks(1000) {
                s.write(piece).unwrap();
                tokio::task::yield_now().await;
            }
            (
                s.seal(&[], BlockInfo::tokens(g.block_tokens())).unwrap().id,
                bytes,
            )
        });
    }
    let mut puts = Vec::new();
    while let Some(done) = tasks.join_next().await {
        puts.push(done.unwrap());
    }
    for (id, bytes) in &puts {
        let (got, _) = read_back(&node, &[a], id).expect("every put is held");
        assert_eq!(&got, bytes);
    }
    let s = node.snapshot().unwrap();
    assert!(s.counters.demotions >= 4, "{:?}", s.counters);
    assert_eq!(s.held, 6);
}

#[tokio::test]
async fn a_put_is_refused_when_no_room_can_come_back_or_the_wait_runs_out() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    // Host only, one block: a held block has nowhere to go.
    let mut node = LocalNode::open(StoreConfig::host_only(ByteCount(block_bytes(&g))), &[a])
        .unwrap()
        .0;
    node.set_reserve_wait_ms_max(50);
    let node = Arc::new(node);
    let session = PutSession::begin(&node, a, &g, PutForm::Canonical)
        .await
        .unwrap();
    // Held by a reservation in flight: waited for, up to the bound.
    let waited = try_put(&node, a, &g, &payload(&g, 1), None).await;
    assert!(
        matches!(
            waited,
            Err(PutError::Local(LocalError::Store(StoreError::Full { .. })))
        ),
        "{waited:?}"
    );
    drop(session);
    put(&node, a, &g, &payload(&g, 2), None).await;
    // Held by a referenced block and no lower tier: refused at once.
    let refused = try_put(&node, a, &g, &payload(&g, 3), None).await;
    assert!(
        matches!(
            refused,
            Err(PutError::Local(LocalError::Store(StoreError::Full { .. })))
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_disk_hit_is_verified_served_and_promoted() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let dir = tempfile::tempdir().unwrap();
    let config = one_block_then_disk(&g, &dir);
    let node = open(config, &[a]);
    let (p1, p2) = (payload(&g, 1), payload(&g, 2));
    let first = put(&node, a, &g, &p1, None).await;
    let second = put(&node, a, &g, &p2, None).await;
    assert_eq!(node.head(&[a], &first.id).unwrap().unwrap().0, Tier::Disk);
    assert_eq!(
        read_back(&node, &[a], &first.id),
        Some((p1.clone(), Tier::Disk))
    );
    // Promoted after the hit; the other block went down to make room.
    assert_eq!(node.head(&[a], &first.id).unwrap().unwrap().0, Tier::Host);
    assert_eq!(node.head(&[a], &second.id).unwrap().unwrap().0, Tier::Disk);
    assert_eq!(read_back(&node, &[a], &first.id), Some((p1, Tier::Host)));
    assert_eq!(read_back(&node, &[a], &second.id), Some((p2, Tier::Disk)));
    let c = node.snapshot().unwrap().counters;
    assert!(c.promotions >= 1 && c.demotions >= 2, "{c:?}");
}

#[tokio::test]
async fn a_copy_for_another_node_leaves_a_disk_block_on_disk() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let dir = tempfile::tempdir().unwrap();
    let node = open(one_block_then_disk(&g, &dir), &[a]);
    let (p1, p2) = (payload(&g, 1), payload(&g, 2));
    let first = put(&node, a, &g, &p1, None).await;
    let second = put(&node, a, &g, &p2, None).await;
    assert_eq!(node.head(&[a], &first.id).unwrap().unwrap().0, Tier::Disk);
    let promotions = node.snapshot().unwrap().counters.promotions;
    // A peer's fetch, and a push's (or a repair's) copy: the bytes, and the block stays put.
    let served = node.read_copy(&[a], &first.id).unwrap().unwrap();
    assert_eq!(
        (&served.bytes[HEADER_LEN..], served.tier),
        (&p1[..], Tier::Disk)
    );
    let pushed = node.get(&[a], &first.id).unwrap().unwrap();
    assert_eq!(&pushed.bytes()[HEADER_LEN..], &p1[..]);
    assert_eq!(node.head(&[a], &first.id).unwrap().unwrap().0, Tier::Disk);
    assert_eq!(node.head(&[a], &second.id).unwrap().unwrap().0, Tier::Host);
    assert_eq!(node.snapshot().unwrap().counters.promotions, promotions);
    // A client's read still promotes it.
    assert_eq!(read_back(&node, &[a], &first.id), Some((p1, Tier::Disk)));
    assert_eq!(node.head(&[a], &first.id).unwrap().unwrap().0, Tier::Host);
}

#[tokio::test]
async fn what_events_say_of_a_block_survives_reopening_and_a_block_without_a_record_gets_its_header_count(
) {
    use crate::events::{EngineBlock, EngineHash, EventKind, EventLog, EventMetrics};
    use std::sync::Arc;
    let g = tiny();
    let dir = tempfile::tempdir().unwrap();
    let config = || one_block_then_disk(&g, &dir);
    let a = NamespaceKey::derive("a");
    let engine = Arc::new(EngineBlock {
        engine: "vllm/0.33.0".into(),
        page_hashes: (1..=4).map(EngineHash::Int).collect(),
        parent: Some(EngineHash::Bytes(vec![7; 32])),
        page_tokens: g.block_tokens() / 4,
        token_ids: (0..g.block_tokens()).collect(),
        lora_id: None,
        lora_name: None,
        group_idx: Some(0),
        kv_cache_spec_kind: Some("mla_attention".into()),
    });
    // Put without a block-info log: no record for this one.
    let (untracked, with_engine) = {
        let (node, _) = LocalNode::open(config(), &[a]).unwrap();
        let untracked = put(&node, a, &g, &payload(&g, 1), None).await.id;
        // Demotes it to disk (this one is lost with the RAM).
        put(&node, a, &g, &payload(&g, 5), None).await;
        drop(node);
        let (node, _) = LocalNode::open_in(config(), &[a], Some(dir.path())).unwrap();
        let mut s = PutSession::begin(&node, a, &g, PutForm::Canonical)
            .await
            .unwrap();
        s.write(&payload(&g, 2)).unwrap();
        let info = BlockInfo {
            block_tokens: g.block_tokens(),
            engine: Some(engine.clone()),
        };
        let with_engine = s.seal(&[], info).unwrap().id;
        // One more put demotes the engine block to disk; this one is lost with the RAM.
        put(&node, a, &g, &payload(&g, 3), None).await;
        (untracked, with_engine)
    };
    let (node, recovery) = LocalNode::open_in(config(), &[a], Some(dir.path())).unwrap();
    assert_eq!(recovery.held, 2);
    let log = Arc::new(EventLog::new(
        crate::ids::NodeId(1),
        2,
        4,
        EventMetrics::default(),
    ));
    node.attach_events(log.clone()).unwrap();
    let first = &log.buffered_from(0)[0];
    let stored: Vec<(Vec<BlockId>, BlockInfo)> = first.events[1..]
        .iter()
        .map(|e| match e {
            EventKind::Stored {
                ids, info, tier, ..
            } => {
                assert_eq!(*tier, Tier::Disk);
                (ids.clone(), info.clone())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        stored,
        [
            (vec![untracked], BlockInfo::tokens(g.block_tokens())),
            (
                vec![with_engine],
                BlockInfo {
                    block_tokens: g.block_tokens(),
                    engine: Some(engine.clone()),
                }
            ),
        ]
    );
    // Its removal names the engine's identity too.
    assert_eq!(
        node.delete(&a, &[a], &with_engine).unwrap(),
        Deleted::Released
    );
    let removed = log.buffered_from(1).pop().unwrap();
    assert!(
        matches!(&removed.events[..], [EventKind::Removed { engine: Some(e), .. }] if *e == engine),
        "{:?}",
        removed.events
    );
    // The record of a deleted block does not come back.
    drop(node);
    let (node, _) = LocalNode::open_in(config(), &[a], Some(dir.path())).unwrap();
    assert_eq!(
        node.info(&a, &untracked).unwrap(),
        Some(BlockInfo::tokens(g.block_tokens()))
    );
    assert_eq!(node.info(&a, &with_engine).unwrap(), None);
}

#[tokio::test]
async fn an_install_is_published_with_its_header_count_and_the_peer_engine_identity() {
    use crate::events::{EngineBlock, EngineHash, EventKind, EventLog, EventMetrics};
    use std::sync::Arc;
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let src = open(StoreConfig::host_only(ByteCount(1 << 20)), &[a]);
    let id = put(&src, a, &g, &payload(&g, 4), None).await.id;
    let served = src.read(&[a], &id).unwrap().unwrap();
    let block = VerifiedBlock::verify(a, id, served.bytes.to_vec()).unwrap();
    let (dst, _) = LocalNode::open(StoreConfig::host_only(ByteCount(1 << 20)), &[a]).unwrap();
    let log = Arc::new(EventLog::new(
        crate::ids::NodeId(2),
        1,
        4,
        EventMetrics::default(),
    ));
    dst.attach_events(log.clone()).unwrap();
    let engine = Arc::new(EngineBlock {
        engine: "vllm/0.33.0".into(),
        page_hashes: vec![EngineHash::Int(5)],
        parent: None,
        page_tokens: g.block_tokens(),
        token_ids: vec![],
        lora_id: None,
        lora_name: None,
        group_idx: None,
        kv_cache_spec_kind: None,
    });
    dst.install_with(&block, Some(engine.clone()))
        .await
        .unwrap();
    let b = log.buffered_from(1).pop().unwrap();
    let EventKind::Stored { info, .. } = &b.events[0] else {
        panic!("{:?}", b.events)
    };
    assert_eq!(info.block_tokens, g.block_tokens());
    assert_eq!(info.engine.as_ref(), Some(&engine));
    // An identity that does not fit the block is dropped, the count kept.
    let (dst2, _) = LocalNode::open(StoreConfig::host_only(ByteCount(1 << 20)), &[a]).unwrap();
    let mut bad = (*engine).clone();
    bad.page_tokens = 1;
    dst2.install_with(&block, Some(Arc::new(bad)))
        .await
        .unwrap();
    assert_eq!(
        dst2.info(&a, &id).unwrap(),
        Some(BlockInfo::tokens(g.block_tokens()))
    );
}

/// Flips one byte in the middle of where `payload` sits in the segment files under `dir`.
fn rot_on_disk(dir: &std::path::Path, payload: &[u8]) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(payload.len()).position(|w| w == payload) {
            bytes[at + payload.len() / 2] ^= 0x40;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("the payload is in no segment file under {}", dir.display());
}

#[tokio::test]
async fn a_scrub_finds_a_rotten_disk_copy_forgets_it_and_reports_it_lost() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let dir = tempfile::tempdir().unwrap();
    let config = one_block_then_disk(&g, &dir);
    let node = open(config, &[a]);
    let mut changes = node.watch_changes().unwrap();
    let (p1, p2, p3) = (payload(&g, 1), payload(&g, 2), payload(&g, 3));
    let rotten = put(&node, a, &g, &p1, None).await.id;
    let sound = put(&node, a, &g, &p2, None).await.id;
    let _in_ram = put(&node, a, &g, &p3, None).await.id;
    let on_disk: Vec<BlockId> = node.disk_held().unwrap().into_iter().map(|b| b.1).collect();
    assert_eq!(on_disk.len(), 2, "{on_disk:?}");
    while changes.try_recv().is_ok() {} // the demotions
    rot_on_disk(&dir.path().join("disk"), &p1);

    node.scrub_pass(u64::MAX).await;
    assert_eq!(
        node.scrub_counters().values(),
        [1, 1, block_bytes(&g), 1, 0]
    );
    assert!(node.head(&[a], &rotten).unwrap().is_none(), "forgotten");
    assert_eq!(read_back(&node, &[a], &sound), Some((p2, Tier::Disk)));
    assert_eq!(
        changes.try_recv().unwrap(),
        HoldingChange::Lost {
            namespace: a,
            id: rotten
        }
    );
    assert_eq!(node.snapshot().unwrap().counters.disk.quarantined, 1);

    // A second pass reads the sound copy only (promoted by the read above: skipped if so).
    node.scrub_pass(u64::MAX).await;
    let [passes, _, _, lost, errors] = node.scrub_counters().values();
    assert_eq!((passes, lost, errors), (2, 1, 0));
}

#[tokio::test]
async fn a_scrub_paces_its_reads_and_does_not_count_them_as_hits() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let dir = tempfile::tempdir().unwrap();
    let config = one_block_then_disk(&g, &dir);
    let node = open(config, &[a]);
    for seed in 0..5 {
        put(&node, a, &g, &payload(&g, seed), None).await;
    }
    let hits = node.snapshot().unwrap().counters.hits;
    let start = std::time::Instant::now();
    // Four disk blocks at two blocks' bytes per second: at least ~1.5 s.
    node.scrub_pass(block_bytes(&g) * 2).await;
    let took = start.elapsed();
    assert!(took >= std::time::Duration::from_millis(1_400), "{took:?}");
    assert_eq!(node.scrub_counters().values()[1], 4);
    assert_eq!(node.snapshot().unwrap().counters.hits, hits, "not a use");
}
