//! Issuing request ids so that a request still being retried is never forgotten by the
//! state machine.
//!
//! The session table ([`crate::sessions`]) keeps the last [`REPLIES_PER_CLIENT_MAX`] replies
//! of each client and refuses a request at or below what it forgot (`RequestExpired`): it
//! cannot tell whether that one was applied. A handle pipelines its writes (the batcher keeps
//! several entries in flight), so one of them can be stuck at a leader that died while the
//! others run through the new leader; were 64 later requests of the same client applied
//! before it, its retry would find itself below the floor and be refused though it never
//! applied. [`RequestIds`] rules that out: it never issues a sequence number
//! [`REPLIES_PER_CLIENT_MAX`] or more past the oldest request of the same client still in
//! flight. When the next number would be, the handle moves to a fresh client id; the requests
//! in flight keep theirs and end under the old one, whose table no longer moves.
//!
//! A request is in flight from its [`Ticket`]'s issue until the ticket is dropped: when its
//! proposer has stopped retrying it, whatever the outcome.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::command::RequestId;
use crate::sessions::REPLIES_PER_CLIENT_MAX;

/// How far past its client's oldest request in flight a new sequence number may be.
const SEQ_WINDOW: u64 = REPLIES_PER_CLIENT_MAX as u64;

#[derive(Debug)]
struct State {
    client: u64,
    /// Sequence numbers issued under `client` so far.
    seq: u64,
    /// Those of `client` still in flight.
    in_flight: BTreeSet<u64>,
    /// Client ids this handle has moved to after its first.
    moves: u64,
}

/// One handle's request ids.
#[derive(Debug)]
pub(crate) struct RequestIds {
    first: u64,
    state: Mutex<State>,
}

/// A request id in flight; dropping it says its proposer stopped retrying it.
#[derive(Debug)]
pub(crate) struct Ticket {
    ids: Arc<RequestIds>,
    id: RequestId,
}

impl Ticket {
    /// The id to propose (and retry) the request under.
    pub(crate) fn id(&self) -> RequestId {
        self.id
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.ids.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.client == self.id.client {
            s.in_flight.remove(&self.id.seq);
        }
    }
}

impl RequestIds {
    /// Ids under `client` first (drawn at random per handle, see `client_nonce`).
    pub(crate) fn new(client: u64) -> Arc<RequestIds> {
        Arc::new(RequestIds {
            first: client,
            state: Mutex::new(State {
                client,
                seq: 0,
                in_flight: BTreeSet::new(),
                moves: 0,
            }),
        })
    }

    /// A fresh id, in flight until the ticket is dropped.
    pub(crate) fn issue(self: &Arc<Self>) -> Ticket {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let next = s.seq + 1;
        if s.in_flight
            .first()
            .is_some_and(|&oldest| next - oldest >= SEQ_WINDOW)
        {
            s.moves += 1;
            let mut h = blake3::Hasher::new();
            h.update(&self.first.to_le_bytes());
            h.update(&s.moves.to_le_bytes());
            let client = u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8"));
            tracing::debug!(
                from = s.client,
                to = client,
                oldest = ?s.in_flight.first(),
                next,
                "a request still in flight is {SEQ_WINDOW} behind: new proposals take a new client id"
            );
            s.client = client;
            s.seq = 0;
            s.in_flight.clear();
        }
        s.seq += 1;
        let id = RequestId {
            client: s.client,
            seq: s.seq,
        };
        s.in_flight.insert(id.seq);
        Ticket {
            ids: self.clone(),
            id,
        }
    }

    /// Client ids this handle has moved to after its first.
    #[cfg(test)]
    pub(crate) fn moves(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).moves
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::CommandReply;
    use crate::sessions::Sessions;

    #[test]
    fn ids_count_up_under_one_client_while_nothing_is_held() {
        let ids = RequestIds::new(7);
        for seq in 1..=1_000 {
            let t = ids.issue();
            assert_eq!(t.id(), RequestId { client: 7, seq });
        }
        assert_eq!(ids.moves(), 0);
    }

    #[test]
    fn a_request_held_in_flight_is_never_pushed_below_its_clients_floor() {
        let ids = RequestIds::new(7);
        let mut table = Sessions::default();
        let held = ids.issue();
        let mut index = 0;
        // Many later requests of the same handle are applied while the first one is retried.
        for _ in 0..1_000 {
            let t = ids.issue();
            index += 1;
            table.record(t.id(), CommandReply::Empty, index);
        }
        assert_eq!(
            table.seen(held.id()),
            None,
            "the held request is neither forgotten nor refused: its retry applies"
        );
        assert!(ids.moves() >= 1, "the handle moved to a new client id");
        // Applied, its reply is kept however many more requests follow.
        table.record(
            held.id(),
            CommandReply::LeaseRenewed { until_ms: 9 },
            index + 1,
        );
        for _ in 0..1_000 {
            let t = ids.issue();
            index += 1;
            table.record(t.id(), CommandReply::Empty, index + 1);
        }
        assert_eq!(
            table.seen(held.id()),
            Some(CommandReply::LeaseRenewed { until_ms: 9 })
        );
    }

    #[test]
    fn without_the_window_the_same_history_refuses_the_retry() {
        // What the window prevents: one client, 64 later requests applied first.
        let mut table = Sessions::default();
        let held = RequestId { client: 7, seq: 1 };
        for seq in 2..=(SEQ_WINDOW + 2) {
            table.record(RequestId { client: 7, seq }, CommandReply::Empty, seq);
        }
        assert!(matches!(
            table.seen(held),
            Some(CommandReply::Rejected(
                crate::command::Rejection::RequestExpired { .. }
            ))
        ));
    }

    #[test]
    fn a_dropped_ticket_leaves_the_window() {
        let ids = RequestIds::new(7);
        let first = ids.issue();
        drop(first);
        for _ in 0..10 * SEQ_WINDOW {
            let _t = ids.issue();
        }
        assert_eq!(ids.moves(), 0, "nothing held: no reason to move");
        let held = ids.issue();
        let mut kept = Vec::new();
        for _ in 0..SEQ_WINDOW - 1 {
            kept.push(ids.issue());
        }
        assert_eq!(ids.moves(), 0, "63 past the held one fit the window");
        let next = ids.issue();
        assert_eq!(ids.moves(), 1);
        assert_ne!(next.id().client, held.id().client);
        assert_eq!(next.id().seq, 1);
        // Tickets of the old client leaving do not disturb the new client's window.
        drop(held);
        drop(kept);
        assert_eq!(ids.issue().id().seq, 2);
    }

    /// Through a real cluster: a follower's request held while 100 later writes of the same
    /// handle commit still applies once when it is finally sent, and its retry gets the first
    /// reply.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_held_behind_a_hundred_later_ones_applies_once() {
        use crate::command::{Command, Request};
        use crate::ids::NodeId;
        use crate::preappend_tests::{cluster, LIMIT};
        use crate::rpc::{ForwardRequest, ForwardResponse};

        let dir = tempfile::tempdir().unwrap();
        let (c, _leader, followers) = cluster(dir.path(), false).await;
        let member = c.member(followers[0]);
        let held = member.inner.ids.issue();
        for node in 100..200 {
            member.join(NodeId(node)).await.unwrap();
        }
        assert!(member.inner.ids.moves() >= 1);
        let request = Request {
            id: held.id(),
            command: Command::Join {
                node: NodeId(7),
                until_ms: u64::MAX / 2,
            },
        };
        let mut replies = Vec::new();
        for _ in 0..2 {
            let write = ForwardRequest::Write(request.clone());
            match member
                .on_leader(write, LIMIT.as_millis() as u64, "write")
                .await
            {
                Ok(ForwardResponse::Write(Ok((_, reply)))) => replies.push(reply),
                other => panic!("a write reply expected, found {other:?}"),
            }
        }
        assert!(
            matches!(replies[0], CommandReply::Joined { .. }),
            "the held write applies: {:?}",
            replies[0]
        );
        assert_eq!(replies[0], replies[1], "its retry gets the first reply");
        drop(held);
        c.shutdown().await.unwrap();
    }
}
