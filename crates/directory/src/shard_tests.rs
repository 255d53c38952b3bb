//! Unit tests of the shard state machine: epochs, leases, purges, chunk mappings.

use kvfabric_store::{BlockId, Tier};

use super::ShardState;
use crate::command::{Command, CommandReply, OwnershipBatch, Rejection};
use crate::ids::{ChunkKey, Epoch, NodeId, ShardId};
use crate::owner::Liveness;

fn block(i: u8) -> BlockId {
    BlockId([i; 32])
}

fn chunk(i: u8) -> ChunkKey {
    ChunkKey([i; 32])
}

fn join(s: &mut ShardState, node: u64, until_ms: u64) -> Epoch {
    match s.apply(&Command::Join {
        node: NodeId(node),
        until_ms,
    }) {
        CommandReply::Joined { epoch, .. } => epoch,
        other => panic!("expected Joined, found {other:?}"),
    }
}

fn claim(s: &mut ShardState, node: u64, epoch: Epoch, blocks: &[u8]) -> CommandReply {
    let claims = blocks.iter().map(|b| (block(*b), Tier::Host)).collect();
    let chunks = blocks.iter().map(|b| (chunk(*b), block(*b))).collect();
    s.apply(&Command::Ownership(OwnershipBatch::claim(
        NodeId(node),
        epoch,
        claims,
        chunks,
    )))
}

#[test]
fn claims_resolve_and_release() {
    let mut s = ShardState::new(ShardId(0));
    let e = join(&mut s, 1, 1_000);
    assert_eq!(e, Epoch(1));
    assert_eq!(
        claim(&mut s, 1, e, &[1, 2]),
        CommandReply::Applied {
            claimed: 2,
            released: 0,
            chunks: 2
        }
    );
    assert_eq!(s.resolve(&chunk(1)), Some(block(1)));
    assert_eq!(s.owners(&block(2)).len(), 1);
    let r = s.apply(&Command::Ownership(OwnershipBatch::release(
        NodeId(1),
        e,
        vec![(block(1), Tier::Host)],
    )));
    assert_eq!(
        r,
        CommandReply::Applied {
            claimed: 0,
            released: 1,
            chunks: 0
        }
    );
    // The block lost its last owner, so its chunk mapping went with it.
    assert_eq!(s.resolve(&chunk(1)), None);
    assert!(s.owners(&block(1)).is_empty());
    s.check_invariants().unwrap();
}

#[test]
fn a_tier_move_in_one_entry_keeps_the_block_and_its_chunk() {
    let mut s = ShardState::new(ShardId(0));
    let e = join(&mut s, 1, 1_000);
    claim(&mut s, 1, e, &[1]);
    let mut moved = OwnershipBatch::claim(NodeId(1), e, vec![(block(1), Tier::Disk)], vec![]);
    moved.releases.push((block(1), Tier::Host));
    assert_eq!(
        s.apply(&Command::Ownership(moved)),
        CommandReply::Applied {
            claimed: 1,
            released: 1,
            chunks: 0
        }
    );
    assert_eq!(s.resolve(&chunk(1)), Some(block(1)), "the chunk survives");
    let tiers: Vec<Tier> = s.owners(&block(1)).iter().map(|o| o.tier).collect();
    assert_eq!(tiers, vec![Tier::Disk]);
    s.check_invariants().unwrap();
}

#[test]
fn a_rejoining_holder_keeps_its_chunks_dormant_until_it_claims_again() {
    let mut s = ShardState::new(ShardId(0));
    let e1 = join(&mut s, 1, 1_000);
    claim(&mut s, 1, e1, &[1, 2]);
    // Restart: the join purges the old incarnation's records; the chunks stay, dormant.
    let e2 = join(&mut s, 1, 5_000);
    assert!(s.owners(&block(1)).is_empty());
    assert_eq!(
        s.resolve(&chunk(1)),
        Some(block(1)),
        "a dormant block still resolves, with no owners"
    );
    assert_eq!(s.dormant_count(), 2);
    s.check_invariants().unwrap();
    // It registers block 1 again by id alone: its chunk mapping comes back with it.
    let again = OwnershipBatch::claim(NodeId(1), e2, vec![(block(1), Tier::Disk)], vec![]);
    s.apply(&Command::Ownership(again));
    assert_eq!(s.resolve(&chunk(1)), Some(block(1)));
    assert_eq!(s.dormant_count(), 1);
    s.check_invariants().unwrap();
    // Block 2 never comes back: its mapping goes at the join's lease deadline.
    assert!(!s.expiry_due(4_999));
    assert!(s.expiry_due(5_000));
    s.apply(&Command::RenewLease {
        node: NodeId(1),
        epoch: e2,
        until_ms: 9_000,
    });
    s.apply(&Command::ExpireLeases {
        now_ms: 5_000,
        keep_chunks_ms: 0,
    });
    assert_eq!(s.dormant_count(), 0);
    assert_eq!(s.chunk_count(), 1, "only block 1's mapping is left");
    assert_eq!(s.resolve(&chunk(1)), Some(block(1)));
    s.check_invariants().unwrap();
}

#[test]
fn a_chunk_moved_off_a_dormant_block_ends_its_dormancy() {
    let mut s = ShardState::new(ShardId(0));
    let e1 = join(&mut s, 1, 1_000);
    claim(&mut s, 1, e1, &[1]);
    let e2 = join(&mut s, 1, 5_000);
    assert_eq!(s.dormant_count(), 1);
    // The same chunk key now names another block.
    let moved = OwnershipBatch::claim(
        NodeId(1),
        e2,
        vec![(block(7), Tier::Host)],
        vec![(chunk(1), block(7))],
    );
    s.apply(&Command::Ownership(moved));
    assert_eq!(s.resolve(&chunk(1)), Some(block(7)));
    assert_eq!(s.dormant_count(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn stale_and_future_epochs_are_rejected() {
    let mut s = ShardState::new(ShardId(0));
    let e1 = join(&mut s, 7, 1_000);
    claim(&mut s, 7, e1, &[1]);
    let e2 = join(&mut s, 7, 1_000);
    assert_eq!(e2, Epoch(2));
    // The restart dropped the old incarnation's records.
    assert!(s.owners(&block(1)).is_empty());
    assert_eq!(
        claim(&mut s, 7, e1, &[2]),
        CommandReply::Rejected(Rejection::StaleEpoch {
            node: NodeId(7),
            expected: e2,
            found: e1
        })
    );
    assert_eq!(
        claim(&mut s, 7, Epoch(9), &[2]),
        CommandReply::Rejected(Rejection::FutureEpoch {
            node: NodeId(7),
            expected: e2,
            found: Epoch(9)
        })
    );
    assert_eq!(
        claim(&mut s, 8, Epoch(1), &[2]),
        CommandReply::Rejected(Rejection::UnknownNode { node: NodeId(8) })
    );
    assert!(s.owners(&block(2)).is_empty());
    s.check_invariants().unwrap();
}

#[test]
fn expiry_purges_only_lapsed_nodes_and_blocks_their_claims() {
    let mut s = ShardState::new(ShardId(0));
    let e1 = join(&mut s, 1, 1_000);
    let e2 = join(&mut s, 2, 1_000);
    claim(&mut s, 1, e1, &[1, 2, 3]);
    claim(&mut s, 2, e2, &[3, 4]);
    s.apply(&Command::RenewLease {
        node: NodeId(2),
        epoch: e2,
        until_ms: 5_000,
    });
    assert_eq!(s.expired_at(999), Vec::<NodeId>::new());
    assert_eq!(s.expired_at(1_000), vec![NodeId(1)]);
    let r = s.apply(&Command::ExpireLeases {
        now_ms: 1_000,
        keep_chunks_ms: 0,
    });
    let CommandReply::Expired { nodes } = r else {
        panic!("expected Expired, found {r:?}")
    };
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].node, NodeId(1));
    assert_eq!(nodes[0].records_purged, 3);
    // Blocks 1 and 2 had no other owner: their chunk keys went too. Block 3 stays with node 2.
    assert_eq!(nodes[0].chunks_dropped, 2);
    assert_eq!(s.records_of(NodeId(1)), 0);
    assert_eq!(s.owners(&block(3)).len(), 1);
    assert_eq!(s.resolve(&chunk(3)), Some(block(3)));
    assert_eq!(s.node(NodeId(1)).unwrap().liveness, Liveness::Expired);
    // An expired node cannot claim nor renew until it joins again.
    assert!(matches!(
        claim(&mut s, 1, e1, &[9]),
        CommandReply::Rejected(Rejection::LeaseExpired { .. })
    ));
    let e1b = join(&mut s, 1, 9_000);
    assert_eq!(e1b, Epoch(2));
    assert!(matches!(
        claim(&mut s, 1, e1b, &[9]),
        CommandReply::Applied { claimed: 1, .. }
    ));
    s.check_invariants().unwrap();
}

#[test]
fn lease_never_shrinks() {
    let mut s = ShardState::new(ShardId(0));
    let e = join(&mut s, 1, 5_000);
    let r = s.apply(&Command::RenewLease {
        node: NodeId(1),
        epoch: e,
        until_ms: 3_000,
    });
    assert_eq!(r, CommandReply::LeaseRenewed { until_ms: 5_000 });
}

#[test]
fn snapshot_round_trip_rebuilds_indexes() {
    let mut s = ShardState::new(ShardId(3));
    let e = join(&mut s, 1, 1_000);
    claim(&mut s, 1, e, &[1, 2, 3]);
    let bytes =
        bincode::serde::encode_to_vec(&s, bincode::config::standard()).expect("encode shard");
    let (mut back, _): (ShardState, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
            .expect("decode shard");
    back.rebuild_indexes();
    assert_eq!(back, s);
    back.check_invariants().unwrap();
}

#[test]
fn a_retried_request_applies_once() {
    use crate::command::{Request, RequestId};
    let mut s = ShardState::new(ShardId(0));
    let join = Request {
        id: RequestId { client: 42, seq: 1 },
        command: Command::Join {
            node: NodeId(1),
            until_ms: 1_000,
        },
    };
    let first = s.apply_request(&join, 1);
    let e1 = s.node(NodeId(1)).unwrap().epoch;
    // The retry lands later in the log: same reply, no second epoch.
    let again = s.apply_request(&join, 5);
    assert_eq!(first, again);
    assert_eq!(s.node(NodeId(1)).unwrap().epoch, e1);
    let other = Request {
        id: RequestId { client: 42, seq: 2 },
        ..join
    };
    s.apply_request(&other, 6);
    assert_eq!(s.node(NodeId(1)).unwrap().epoch, e1.next());
}

#[test]
fn an_expired_holder_that_returns_within_the_grace_gets_its_chunks_back() {
    let mut s = ShardState::new(ShardId(0));
    let e1 = join(&mut s, 1, 1_000);
    claim(&mut s, 1, e1, &[1, 2]);
    // Paused past its lease: purged, chunk mappings dormant for 3 s.
    s.apply(&Command::ExpireLeases {
        now_ms: 1_000,
        keep_chunks_ms: 3_000,
    });
    assert_eq!(s.resolve(&chunk(1)), Some(block(1)));
    assert!(s.owners(&block(1)).is_empty());
    assert_eq!(s.dormant_count(), 2);
    s.check_invariants().unwrap();
    // It resumes, joins again and registers block 1 by id within the grace.
    let e2 = join(&mut s, 1, 9_000);
    let again = OwnershipBatch::claim(NodeId(1), e2, vec![(block(1), Tier::Host)], vec![]);
    s.apply(&Command::Ownership(again));
    assert_eq!(s.resolve(&chunk(1)), Some(block(1)));
    // Block 2's mapping goes at the end of the grace.
    assert!(s.expiry_due(4_000));
    s.apply(&Command::ExpireLeases {
        now_ms: 4_000,
        keep_chunks_ms: 3_000,
    });
    assert_eq!(s.chunk_count(), 1);
    assert_eq!(s.dormant_count(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn a_merged_entry_applies_each_request_once_in_order() {
    use crate::command::{Request, RequestId};
    let mut s = ShardState::new(ShardId(0));
    let e1 = join(&mut s, 1, 10_000);
    let e2 = join(&mut s, 2, 10_000);
    let req = |client: u64, seq: u64, command: Command| Request {
        id: RequestId { client, seq },
        command,
    };
    let batch = |node: u64, epoch: Epoch, b: u8| {
        Command::Ownership(OwnershipBatch::claim(
            NodeId(node),
            epoch,
            vec![(block(b), Tier::Host)],
            vec![],
        ))
    };
    // Node 1's request was applied on its own before (a retry now lands in a merged entry).
    let first = s.apply_request(&req(7, 1, batch(1, e1, 1)), 10);
    let merged = req(
        99,
        1,
        Command::Merged(vec![
            req(7, 1, batch(1, e1, 1)),
            req(8, 1, batch(2, e2, 2)),
            req(9, 1, Command::Merged(vec![])),
            req(8, 2, batch(2, Epoch(e2.0 + 5), 3)),
        ]),
    );
    let reply = s.apply_request(&merged, 11);
    let CommandReply::Merged(each) = reply else {
        panic!("expected Merged, found {reply:?}");
    };
    assert_eq!(each.len(), 4);
    assert_eq!(
        each[0], first,
        "the retry is answered from the session table"
    );
    assert!(matches!(each[1], CommandReply::Applied { claimed: 1, .. }));
    assert_eq!(each[2], CommandReply::Rejected(Rejection::NestedMerge));
    assert!(matches!(
        each[3],
        CommandReply::Rejected(Rejection::FutureEpoch { .. })
    ));
    assert_eq!(s.block_count(), 2, "blocks 1 and 2 held, block 3 refused");
}

/// Found by the `snapshot` fuzz target: a snapshot (checksum right) whose state broke an
/// invariant was installed as it was. Each broken invariant is now refused as corrupt.
#[test]
fn a_snapshot_breaking_an_invariant_is_refused() {
    use crate::error::DirectoryError;
    use crate::owner::Owner;
    use crate::storage::snapshot::{decode_snapshot, encode_snapshot};

    let mut good = ShardState::new(ShardId(1));
    let epoch = join(&mut good, 1, 1_000);
    claim(&mut good, 1, epoch, &[1, 2]);
    let bytes = encode_snapshot(&good).unwrap();
    assert_eq!(decode_snapshot(&bytes, ShardId(1)).unwrap(), good);

    let mut unknown_owner = good.clone();
    let stranger = Owner {
        node: NodeId(9),
        tier: Tier::Host,
        epoch: Epoch(1),
    };
    unknown_owner
        .blocks
        .entry(block(1))
        .or_default()
        .insert(stranger);
    let mut no_owner = good.clone();
    no_owner.blocks.insert(block(3), Default::default());
    let mut dangling_chunk = good.clone();
    dangling_chunk.chunks.insert(chunk(4), block(4));
    let mut owned_and_dormant = good.clone();
    owned_and_dormant.dormant.insert(block(1), 5);
    for bad in [unknown_owner, no_owner, dangling_chunk, owned_and_dormant] {
        let bytes = encode_snapshot(&bad).unwrap();
        assert!(
            matches!(
                decode_snapshot(&bytes, ShardId(1)),
                Err(DirectoryError::Corrupt {
                    what: "snapshot",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
}
