//! One WAL record (`frame.rs`): framing and body decoding.
//!
//! Properties: a record parsed as found spans exactly its declared length; with length and
//! checksum made right around arbitrary bytes (so the body decoders are reached), the parser
//! accepts exactly the kinds 1..=6 and hands back the very body; a body that decodes re-frames
//! into a record that parses and decodes to the same value, no longer than the original (the
//! encoding is canonical up to bincode's variable-length integers, which it reads in any
//! width), so re-encoding is a fixed point.

use openraft::{CommittedLeaderId, EntryPayload, Vote};

use super::super::frame::{checksum, decode_record, parse, Kind, Parsed, Record, HEADER_LEN};
use super::super::Checkpoint;
use crate::ids::NodeId;
use crate::type_config::{Entry, LogId};

/// `len ‖ sum ‖ kind ‖ body` with the length and checksum right, whatever the kind byte.
pub(super) fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = (body.len() as u32 + 1).to_le_bytes();
    let mut kind_and_body = vec![kind];
    kind_and_body.extend_from_slice(body);
    let mut out = len.to_vec();
    out.extend_from_slice(&checksum(&len, &kind_and_body));
    out.extend_from_slice(&kind_and_body);
    out
}

/// A body that decodes re-frames to a record that decodes to the same value.
fn check_decoded(kind: Kind, body: &[u8]) {
    let Ok(record) = decode_record(kind, body) else {
        return;
    };
    let mut again = Vec::new();
    record
        .write_to(&mut again)
        .expect("a decoded record encodes");
    match parse(&again) {
        Parsed::Record {
            kind: k,
            body: b,
            total,
        } => {
            assert_eq!((k, total), (kind, again.len()), "re-framed header");
            assert!(b.len() <= body.len(), "re-encoding is longer");
            let decoded = decode_record(k, b).expect("a re-framed record decodes");
            assert_eq!(decoded, record, "re-framed record");
        }
        other => panic!("a re-framed record must parse, found {other:?}"),
    }
}

/// Checks the properties on `data` (see the module docs).
pub fn run(data: &[u8]) {
    match parse(data) {
        Parsed::End => assert!(data.len() < 4 || data[..4] == [0; 4], "end of log at data"),
        Parsed::Bad(_) => {}
        Parsed::Record { kind, body, total } => {
            let len = u32::from_le_bytes(data[..4].try_into().expect("4 bytes")) as usize;
            assert_eq!(total, HEADER_LEN + len, "record length");
            assert_eq!(body.len() + HEADER_LEN + 1, total, "body length");
            check_decoded(kind, body);
        }
    }
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let kind = kind % 8;
    let frame = framed(kind, body);
    match parse(&frame) {
        Parsed::Record {
            kind: k,
            body: b,
            total,
        } => {
            assert!((1..=6).contains(&kind), "accepted kind {kind}");
            assert_eq!(
                (k as u8, b, total),
                (kind, body, frame.len()),
                "parsed record"
            );
            check_decoded(k, b);
        }
        Parsed::Bad(why) => assert!(!(1..=6).contains(&kind), "refused kind {kind}: {why}"),
        Parsed::End => panic!("a record of length {} read as the end", body.len() + 1),
    }
}

/// Seed inputs: one record of every kind framed by the WAL's own encoder, and the same records
/// as `kind ‖ body` (the form the made-right half of [`run`] reads).
pub fn seeds() -> Vec<Vec<u8>> {
    let id = |index| LogId::new(CommittedLeaderId::new(3, NodeId(2)), index);
    let records = [
        Record::Entry(Box::new(Entry {
            log_id: id(7),
            payload: EntryPayload::Blank,
        })),
        Record::Vote(Vote::new(4, NodeId(1))),
        Record::Committed(Some(id(6))),
        Record::Committed(None),
        Record::Truncate(9),
        Record::Purge(id(2)),
        Record::Checkpoint(Checkpoint {
            vote: Some(Vote::new(4, NodeId(1))),
            committed: Some(id(6)),
            last_purged: Some(id(300)),
        }),
    ];
    let mut out = Vec::new();
    for r in &records {
        let mut framed = Vec::new();
        r.write_to(&mut framed).expect("a record encodes");
        let mut kind_and_body = vec![framed[HEADER_LEN]];
        kind_and_body.extend_from_slice(&framed[HEADER_LEN + 1..]);
        out.push(framed);
        out.push(kind_and_body);
    }
    out
}
