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
    s.seal(ns, g, PutForm::Canonical, key.as_slice()).unwrap()
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
        s.seal(a, &g, PutForm::Canonical, &[]),
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
    assert_eq!(first.events.len(), 3, "1 epoch + 1024 ids + the rest");
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
                block_tokens: g.block_tokens(),
            }],
            vec![EventKind::Removed {
                namespace: a,
                tier: Some(Tier::Host),
                ids: vec![fresh],
            }],
        ]
    );
}
