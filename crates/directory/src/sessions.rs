//! Deduplication of retried proposals: the replies of each client's recent requests.
//!
//! A write whose outcome the proposer could not learn (leader lost mid-way, response lost) is
//! retried with the same [`RequestId`]; if the first attempt was committed, the retry gets the
//! recorded reply instead of being applied a second time. Without this, a retried write could
//! land after a later write of another client and undo it (the checker catches exactly that).
//!
//! Bounded and deterministic (every replica evicts the same entries): at most
//! [`REPLIES_PER_CLIENT_MAX`] replies per client (the lowest sequence numbers go first, and a
//! request at or below the evicted floor is refused rather than risk a second apply), and at
//! most [`CLIENTS_MAX`] clients (the one whose last request is oldest in the log goes first).
//! A handle never lets a request it is still retrying fall to that floor: it moves to a new
//! client id rather than issue 64 numbers past it (`request_ids`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::{CommandReply, Rejection, RequestId};

/// Replies remembered per client: more than its proposals in flight at once.
pub const REPLIES_PER_CLIENT_MAX: usize = 64;
/// Clients remembered (directory handles: one per member start, plus tools).
pub const CLIENTS_MAX: usize = 1_024;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    /// Every sequence number at or below this one has been forgotten.
    floor: u64,
    replies: BTreeMap<u64, CommandReply>,
    /// Log index of the client's latest request (for eviction).
    last_index: u64,
}

/// The recent replies of every recent client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sessions {
    clients: BTreeMap<u64, Session>,
}

impl Sessions {
    /// The reply a request already got, if it was applied before (or a refusal if that can no
    /// longer be known).
    pub fn seen(&self, id: RequestId) -> Option<CommandReply> {
        let s = self.clients.get(&id.client)?;
        if let Some(r) = s.replies.get(&id.seq) {
            return Some(r.clone());
        }
        (id.seq <= s.floor).then_some(CommandReply::Rejected(Rejection::RequestExpired {
            id,
            floor: s.floor,
        }))
    }

    /// Records the reply of a request applied at `log_index`.
    pub fn record(&mut self, id: RequestId, reply: CommandReply, log_index: u64) {
        let s = self.clients.entry(id.client).or_default();
        s.replies.insert(id.seq, reply);
        s.last_index = log_index;
        while s.replies.len() > REPLIES_PER_CLIENT_MAX {
            if let Some((seq, _)) = s.replies.pop_first() {
                s.floor = s.floor.max(seq);
            }
        }
        if self.clients.len() > CLIENTS_MAX {
            let oldest = self
                .clients
                .iter()
                .min_by_key(|(c, s)| (s.last_index, **c))
                .map(|(c, _)| *c);
            if let Some(c) = oldest {
                self.clients.remove(&c);
            }
        }
    }

    /// The first bound the table breaks, if any: at most [`CLIENTS_MAX`] clients, at most
    /// [`REPLIES_PER_CLIENT_MAX`] replies each, every reply above its client's floor (what
    /// [`Sessions::record`] keeps; a decoded snapshot could hold anything).
    pub(crate) fn violation(&self) -> Option<String> {
        if self.clients.len() > CLIENTS_MAX {
            return Some(format!(
                "at most {CLIENTS_MAX} session clients expected, found {}",
                self.clients.len()
            ));
        }
        for (client, s) in &self.clients {
            if s.replies.len() > REPLIES_PER_CLIENT_MAX {
                return Some(format!(
                    "at most {REPLIES_PER_CLIENT_MAX} replies of client {client} expected, found {}",
                    s.replies.len()
                ));
            }
            if let Some((&seq, _)) = s.replies.first_key_value().filter(|(q, _)| **q <= s.floor) {
                return Some(format!(
                    "replies of client {client} above its floor {} expected, found {seq}",
                    s.floor
                ));
            }
        }
        None
    }

    /// Clients remembered.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Whether no client is remembered.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(client: u64, seq: u64) -> RequestId {
        RequestId { client, seq }
    }

    #[test]
    fn retries_get_the_first_reply_and_old_ones_are_refused() {
        let mut s = Sessions::default();
        let r = CommandReply::LeaseRenewed { until_ms: 5 };
        assert_eq!(s.seen(id(1, 1)), None);
        s.record(id(1, 1), r.clone(), 10);
        assert_eq!(s.seen(id(1, 1)), Some(r));
        for seq in 2..=(REPLIES_PER_CLIENT_MAX as u64 + 1) {
            s.record(id(1, seq), CommandReply::Empty, 10 + seq);
        }
        assert!(matches!(
            s.seen(id(1, 1)),
            Some(CommandReply::Rejected(Rejection::RequestExpired {
                floor: 1,
                ..
            }))
        ));
        assert_eq!(s.seen(id(1, 2)), Some(CommandReply::Empty));
        assert_eq!(s.seen(id(2, 1)), None);
    }

    #[test]
    fn client_count_is_bounded_oldest_first() {
        let mut s = Sessions::default();
        for c in 0..=(CLIENTS_MAX as u64) {
            s.record(id(c, 1), CommandReply::Empty, c);
        }
        assert_eq!(s.len(), CLIENTS_MAX);
        assert_eq!(s.seen(id(0, 1)), None, "the oldest client was evicted");
        assert_eq!(s.seen(id(1, 1)), Some(CommandReply::Empty));
    }

    #[test]
    fn a_table_past_its_bounds_is_a_violation() {
        let mut s = Sessions::default();
        for client in 0..2 * CLIENTS_MAX as u64 {
            s.record(id(client, 1), CommandReply::Empty, client);
        }
        assert_eq!(
            s.violation(),
            None,
            "what record keeps is within the bounds"
        );
        let session = Session {
            floor: 5,
            replies: BTreeMap::from([(5, CommandReply::Empty)]),
            last_index: 1,
        };
        let at_floor = Sessions {
            clients: BTreeMap::from([(1, session.clone())]),
        };
        assert!(at_floor.violation().is_some(), "a reply at the floor");
        let crowded = Sessions {
            clients: (0..=CLIENTS_MAX as u64)
                .map(|c| (c, Session::default()))
                .collect(),
        };
        assert!(crowded.violation().is_some(), "too many clients");
        let chatty = Session {
            floor: 0,
            replies: (1..=REPLIES_PER_CLIENT_MAX as u64 + 1)
                .map(|q| (q, CommandReply::Empty))
                .collect(),
            last_index: 1,
        };
        let chatty = Sessions {
            clients: BTreeMap::from([(1, chatty)]),
        };
        assert!(chatty.violation().is_some(), "too many replies");
    }
}
