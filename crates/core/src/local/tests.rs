//! The local side without HTTP: puts through reservations, holding, namespaces, deletes,
//! chunk keys and recovery.

use kvfabric_store::tier::disk::DiskConfig;
use kvfabric_store::{ByteCount, Dedup, ModelGeometry, NamespaceKey, PutForm, StoreConfig, Tier};

use super::*;

use kvfabric_test_support::presets::tiny;

fn payload(g: &ModelGeometry, seed: u8) -> Vec<u8> {
    let len = g.block_layout().payload_len as usize;
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn put(
    node: &LocalNode,
    ns: NamespaceKey,
    g: &ModelGeometry,
    bytes: &[u8],
    key: Option<ChunkKey>,
) -> put::Sealed {
    let mut s = PutSession::begin(node, g, bytes.len() as u64).unwrap();
    for piece in bytes.chunks(1000) {
        s.write(piece).unwrap();
    }
    s.seal(
        ns,
        g,
        PutForm::Canonical,
        key.as_slice(),
        BlockInfo::tokens(g.block_tokens()),
    )
    .unwrap()
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

#[test]
fn a_put_is_held_once_read_back_and_released_by_delete() {
    let g = tiny();
    let (a, b) = (NamespaceKey::derive("a"), NamespaceKey::derive("b"));
    let (node, _) = LocalNode::open(StoreConfig::host_only(ByteCount(1 << 20)), &[a, b]).unwrap();
    let p = payload(&g, 1);
    let key = ChunkKey([7; 32]);
    let first = put(&node, a, &g, &p, Some(key));
    assert_eq!(first.dedup, Dedup::New);
    let again = put(&node, a, &g, &p, None);
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

    let (block, tier) = node.get(&[a], &first.id).unwrap().unwrap();
    assert_eq!((block.payload(), tier), (&p[..], Tier::Host));
    assert_eq!(
        node.head(&[a], &first.id).unwrap(),
        Some((Tier::Host, p.len() as u64))
    );
    assert!(
        node.get(&[b], &first.id).unwrap().is_none(),
        "invisible to b"
    );
    assert!(
        node.get(&[b, a], &first.id).unwrap().is_some(),
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
    assert!(node.get(&[a], &first.id).unwrap().is_none());
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

#[test]
fn a_wrong_length_or_a_dropped_session_gives_the_reservation_back() {
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let (node, _) = LocalNode::open(StoreConfig::host_only(ByteCount(1 << 20)), &[a]).unwrap();
    let len = g.block_layout().payload_len;
    let mut s = PutSession::begin(&node, &g, len).unwrap();
    assert!(host_used(&node) > 0, "the reservation takes room");
    s.write(&vec![0; len as usize - 1]).unwrap();
    assert!(matches!(s.write(&[0, 0]), Err(PutError::Length { found, .. }) if found == len + 1));
    assert_eq!(s.written(), len - 1, "a refused piece is not written");
    assert!(matches!(
        s.seal(a, &g, PutForm::Canonical, &[], BlockInfo::tokens(g.block_tokens())),
        Err(PutError::Length { found, .. }) if found == len - 1
    ));
    assert_eq!(host_used(&node), 0);
    let s = PutSession::begin(&node, &g, len).unwrap();
    drop(s);
    assert_eq!(host_used(&node), 0);
}

#[test]
fn blocks_on_disk_are_held_again_after_reopening() {
    let g = tiny();
    let dir = tempfile::tempdir().unwrap();
    let block = g.block_layout().payload_len + kvfabric_store::HEADER_LEN as u64;
    let config = || StoreConfig {
        disk: Some(DiskConfig::new(dir.path().join("disk"), ByteCount(1 << 20))),
        // Room for one block: each put demotes the previous one to disk.
        ..StoreConfig::host_only(ByteCount(block))
    };
    let (a, b) = (NamespaceKey::derive("a"), NamespaceKey::derive("b"));
    let ids: Vec<_> = {
        let (node, _) = LocalNode::open(config(), &[a, b]).unwrap();
        let ids = [(a, 1), (b, 2), (a, 3)]
            .iter()
            .map(|&(ns, seed)| put(&node, ns, &g, &payload(&g, seed), None).id)
            .collect();
        assert!(node.snapshot().unwrap().counters.demotions >= 2);
        ids
    };
    // Reopened knowing only namespace a: b's block is released, a's first block is held; the
    // last put sat in RAM only and is gone.
    let (node, recovery) = LocalNode::open(config(), &[a]).unwrap();
    assert_eq!((recovery.held, recovery.orphaned), (1, 1));
    let (got, tier) = node.get(&[a], &ids[0]).unwrap().unwrap();
    assert_eq!((got.payload(), tier), (&payload(&g, 1)[..], Tier::Disk));
    assert!(node.get(&[a], &ids[2]).unwrap().is_none());
    assert!(node.get(&[b], &ids[1]).unwrap().is_none());
}

#[test]
fn attaching_events_announces_the_epoch_and_what_is_held_then_publishes_changes() {
    use crate::events::{EventKind, EventLog, EventMetrics};
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let n = ANNOUNCE_IDS_MAX + 6;
    let (node, _) = LocalNode::open(StoreConfig::host_only(ByteCount(16 << 20)), &[a]).unwrap();
    let mut held = Vec::new();
    for i in 0..n {
        let mut bytes = payload(&g, 1);
        bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
        held.push(put(&node, a, &g, &bytes, None).id);
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
    let fresh = put(&node, a, &g, &payload(&g, 9), None).id;
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

#[test]
fn what_events_say_of_a_block_survives_reopening_and_a_block_without_a_record_gets_its_header_count(
) {
    use crate::events::{EngineBlock, EngineHash, EventKind, EventLog, EventMetrics};
    use std::sync::Arc;
    let g = tiny();
    let dir = tempfile::tempdir().unwrap();
    let block = g.block_layout().payload_len + kvfabric_store::HEADER_LEN as u64;
    let config = || StoreConfig {
        disk: Some(DiskConfig::new(dir.path().join("disk"), ByteCount(1 << 20))),
        ..StoreConfig::host_only(ByteCount(block))
    };
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
        let untracked = put(&node, a, &g, &payload(&g, 1), None).id;
        // Demotes it to disk (this one is lost with the RAM).
        put(&node, a, &g, &payload(&g, 5), None);
        drop(node);
        let (node, _) = LocalNode::open_in(config(), &[a], Some(dir.path())).unwrap();
        let mut s = PutSession::begin(&node, &g, g.block_layout().payload_len).unwrap();
        s.write(&payload(&g, 2)).unwrap();
        let info = BlockInfo {
            block_tokens: g.block_tokens(),
            engine: Some(engine.clone()),
        };
        let with_engine = s.seal(a, &g, PutForm::Canonical, &[], info).unwrap().id;
        // One more put demotes the engine block to disk; this one is lost with the RAM.
        put(&node, a, &g, &payload(&g, 3), None);
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

#[test]
fn an_install_is_published_with_its_header_count_and_the_peer_engine_identity() {
    use crate::events::{EngineBlock, EngineHash, EventKind, EventLog, EventMetrics};
    use std::sync::Arc;
    let g = tiny();
    let a = NamespaceKey::derive("a");
    let (src, _) = LocalNode::open(StoreConfig::host_only(ByteCount(1 << 20)), &[a]).unwrap();
    let id = put(&src, a, &g, &payload(&g, 4), None).id;
    let (block, _) = src.get(&[a], &id).unwrap().unwrap();
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
    dst.install_with(&block, Some(engine.clone())).unwrap();
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
    dst2.install_with(&block, Some(Arc::new(bad))).unwrap();
    assert_eq!(
        dst2.info(&a, &id).unwrap(),
        Some(BlockInfo::tokens(g.block_tokens()))
    );
}
