//! Replays every committed fuzz input (the minimized corpora in `fuzz/corpus/<target>` and the
//! crashes kept in `fuzz/regressions/<target>`) through the properties the fuzz targets check
//! (`kvfabric_directory::fuzzing`), on stable Rust. The ignored `write_seeds` test writes the
//! seed inputs the corpora grew from: real encodings made with the directory's own encoders.

use std::path::{Path, PathBuf};

use kvfabric_directory::command::{Command, OwnershipBatch, Request, RequestId};
use kvfabric_directory::fuzzing;
use kvfabric_directory::rpc::{ForwardRequest, ForwardResponse, RpcRequest, RpcResponse};
use kvfabric_directory::storage::snapshot::encode_snapshot;
use kvfabric_directory::type_config::{Entry, LogId};
use kvfabric_directory::{ChunkKey, CommandReply, Epoch, NodeId, ShardId, ShardState};
use kvfabric_store::{BlockId, Tier};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft::{CommittedLeaderId, EntryPayload, Vote};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn replay(target: &str, run: fn(&[u8])) {
    kvfabric_store::fuzzing::replay(&fuzz_dir(), target, run);
}

#[test]
fn fuzz_corpus_rpc_frame() {
    replay("rpc_frame", fuzzing::rpc_frame::run);
}

#[test]
fn fuzz_corpus_snapshot() {
    replay("snapshot", fuzzing::snapshot::run);
}

#[test]
fn fuzz_corpus_wal_record() {
    replay("wal_record", fuzzing::wal_record::run);
}

#[test]
fn fuzz_corpus_wal_replay() {
    replay("wal_replay", fuzzing::wal_replay::run);
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, NodeId(1)), index)
}

fn request(seq: u64, command: Command) -> Request {
    Request {
        id: RequestId { client: 77, seq },
        command,
    }
}

/// RPC frames of both directions, each behind a 1 MiB bound.
fn rpc_seeds() -> Vec<(String, Vec<u8>)> {
    let vote = Vote::new(3, NodeId(1));
    let entries = vec![
        Entry {
            log_id: log_id(3, 4),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(3, 5),
            payload: EntryPayload::Normal(request(
                1,
                Command::Join {
                    node: NodeId(2),
                    until_ms: 9_000,
                },
            )),
        },
    ];
    let requests = [
        RpcRequest::Vote(VoteRequest::new(vote, Some(log_id(2, 3)))),
        RpcRequest::AppendEntries(AppendEntriesRequest {
            vote,
            prev_log_id: Some(log_id(3, 3)),
            entries,
            leader_commit: Some(log_id(3, 3)),
        }),
        RpcRequest::Forward(ForwardRequest::ReadIndex),
        RpcRequest::Forward(ForwardRequest::AddLearner {
            node: NodeId(4),
            addr: "10.0.0.4:7000".into(),
        }),
    ];
    let responses = [
        RpcResponse::Vote(Ok(VoteResponse {
            vote,
            vote_granted: true,
            last_log_id: Some(log_id(3, 5)),
        })),
        RpcResponse::AppendEntries(Ok(AppendEntriesResponse::Success)),
        RpcResponse::Forward(ForwardResponse::Write(Ok((6, CommandReply::Empty)))),
        RpcResponse::Forward(ForwardResponse::ReadIndex(Ok(Some(6)))),
    ];
    let max = 1u32 << 20;
    let mut out = Vec::new();
    for r in &requests {
        let frame = r.encode(max as usize).expect("encodes");
        out.push((format!("request-{}", r.kind()), frame));
    }
    for r in &responses {
        let frame = r.encode(max as usize).expect("encodes");
        out.push((format!("response-{}", r.kind()), frame));
    }
    for (name, frame) in &mut out {
        frame.splice(0..0, max.to_le_bytes());
        name.push_str(&format!("-{}", frame.len()));
    }
    out
}

/// A shard that saw a join and an ownership batch, as a snapshot behind its shard byte.
fn snapshot_seed() -> Vec<u8> {
    let mut s = ShardState::new(ShardId(1));
    s.apply(&Command::Join {
        node: NodeId(1),
        until_ms: 10_000,
    });
    let batch = OwnershipBatch {
        node: NodeId(1),
        epoch: Epoch(1),
        claims: vec![
            (BlockId([1; 32]), Tier::Host),
            (BlockId([2; 32]), Tier::Disk),
        ],
        releases: vec![],
        chunks: vec![(ChunkKey([9; 32]), BlockId([1; 32]))],
    };
    s.apply_request(&request(1, Command::Ownership(batch)), 3);
    s.check_invariants().expect("a state the commands made");
    let mut out = vec![1];
    out.extend(encode_snapshot(&s).expect("encodes"));
    out
}

/// Seed programs for `wal_replay` (the byte layout is read by its `Builder`).
fn wal_replay_seeds() -> Vec<(&'static str, Vec<u8>)> {
    const CHECKPOINT: u8 = 1;
    const NO_CUT: u8 = 1;
    let entry_blank = vec![0, 0, 0x11];
    let mut entry_join = vec![0, 2, 0x11];
    entry_join.extend_from_slice(&[5; 8]);
    entry_join.extend_from_slice(&[1; 8]);
    entry_join.push(2);
    entry_join.extend_from_slice(&[0x40; 8]);
    let vote = vec![4, 3];
    let committed = vec![5, 1, 0x11];
    let truncate = vec![6, 0, 1];
    let purge = vec![7, 0, 0x11];
    let segment = |checkpoint: &[u8], ops: &[&[u8]], tail: &[u8]| {
        let mut b = vec![0, CHECKPOINT];
        b.extend_from_slice(checkpoint);
        b.push(ops.len() as u8);
        b.extend(ops.concat());
        b.extend_from_slice(tail);
        b
    };
    let case = |segments: &[Vec<u8>]| {
        let mut b = vec![segments.len() as u8 - 1];
        b.extend(segments.concat());
        b
    };
    let empty_cp: &[u8] = &[0, 0, 0];
    let full_cp: &[u8] = &[1, 1, 0x11, 3, 0x11];
    vec![
        (
            "clean_two_segments",
            case(&[
                segment(
                    empty_cp,
                    &[&entry_blank, &entry_join, &vote, &committed],
                    &[NO_CUT],
                ),
                segment(
                    full_cp,
                    &[&entry_blank, &truncate, &purge, &entry_blank],
                    &[NO_CUT],
                ),
            ]),
        ),
        (
            "torn_last",
            case(&[segment(
                empty_cp,
                &[&entry_blank, &entry_join, &[9, 5, 1, 2, 3, 4, 5]],
                &[0, 3],
            )]),
        ),
        (
            "zeroes_after_records",
            case(&[
                segment(empty_cp, &[&entry_blank, &[10, 50]], &[NO_CUT]),
                segment(empty_cp, &[&entry_blank], &[NO_CUT]),
            ]),
        ),
        (
            "flip_in_a_sealed_segment",
            case(&[
                segment(empty_cp, &[&entry_join, &[11, 40, 0, 3]], &[NO_CUT]),
                segment(empty_cp, &[&entry_blank], &[NO_CUT]),
            ]),
        ),
        ("no_checkpoint", vec![0, 0, 16, 3, 0, NO_CUT]),
    ]
}

#[test]
#[ignore = "writes seed inputs into fuzz/corpus (run once before fuzzing a new target)"]
fn write_seeds() {
    let mut seeds: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for (name, bytes) in rpc_seeds() {
        seeds.push(("rpc_frame", name, bytes));
    }
    seeds.push(("snapshot", "shard-1".into(), snapshot_seed()));
    for (i, bytes) in fuzzing::wal_record::seeds().into_iter().enumerate() {
        seeds.push(("wal_record", format!("{i}"), bytes));
    }
    for (name, bytes) in wal_replay_seeds() {
        seeds.push(("wal_replay", name.into(), bytes));
    }
    for (target, name, bytes) in seeds {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create a corpus directory");
        std::fs::write(dir.join(format!("seed-{name}")), &bytes).expect("write a seed");
        let run: fn(&[u8]) = match target {
            "rpc_frame" => fuzzing::rpc_frame::run,
            "snapshot" => fuzzing::snapshot::run,
            "wal_record" => fuzzing::wal_record::run,
            _ => fuzzing::wal_replay::run,
        };
        run(&bytes);
    }
}
