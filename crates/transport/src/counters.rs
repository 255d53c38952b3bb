//! [`TransportCounters`]: what one transport instance has seen, owned by that instance.
//!
//! Plain relaxed atomics (each counter is independent; nobody derives invariants across two of
//! them). No global statics: two transports in one process (as in the tests) count apart.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one transport; read them with [`TransportCounters::snapshot`].
#[derive(Debug, Default)]
pub struct TransportCounters {
    fetches_ok: AtomicU64,
    fetches_failed: AtomicU64,
    redials: AtomicU64,
    connections_set_aside: AtomicU64,
    verify_failures: AtomicU64,
    protocol_violations: AtomicU64,
    timeouts: AtomicU64,
    connections_opened: AtomicU64,
    connections_closed: AtomicU64,
    handshakes_refused: AtomicU64,
    blocks_served: AtomicU64,
    not_found_served: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    fetches_in_flight: AtomicU64,
    fetches_in_flight_peak: AtomicU64,
    leases_granted: AtomicU64,
    leases_refused: AtomicU64,
    leases_expired: AtomicU64,
    leases_held: AtomicU64,
    pushes_ok: AtomicU64,
    pushes_failed: AtomicU64,
    pushes_stored: AtomicU64,
    pushes_rejected: AtomicU64,
    probes_ok: AtomicU64,
    probes_failed: AtomicU64,
    probes_served: AtomicU64,
    messages_ok: AtomicU64,
    messages_failed: AtomicU64,
    messages_served: AtomicU64,
}

/// A point-in-time copy of [`TransportCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountersSnapshot {
    /// Fetches that yielded a verified block.
    pub fetches_ok: u64,
    /// Fetches from one peer that ended in an error (each owner tried counts once).
    pub fetches_failed: u64,
    /// Fetches whose pooled connection turned out lost before the peer answered (a peer
    /// that restarted resets it), tried once more on a fresh connection.
    pub redials: u64,
    /// Pooled connections set aside because their peer fell silent on them (see
    /// [`crate::Transport::set_aside`]): the next exchange with that peer dialled afresh.
    pub connections_set_aside: u64,
    /// Blocks whose bytes hashed to another id; dropped, never installed.
    pub verify_failures: u64,
    /// Malformed, truncated, oversized or out-of-place frames from peers.
    pub protocol_violations: u64,
    /// Bounded waits that ran out (connect, fetch, request).
    pub timeouts: u64,
    /// Connections established (either side).
    pub connections_opened: u64,
    /// Connections this side closed or lost (either side).
    pub connections_closed: u64,
    /// Handshakes refused by TLS (a certificate not signed by the cluster CA, a wrong name).
    pub handshakes_refused: u64,
    /// Blocks this side served (UCX get mode: leases answered).
    pub blocks_served: u64,
    /// Requests this side answered with not-found or unavailable.
    pub not_found_served: u64,
    /// Block bytes received (headers and payload, before verification).
    pub bytes_in: u64,
    /// Block bytes sent (UCX get mode: a leased block's bytes, counted when the client
    /// releases the lease, having read them).
    pub bytes_out: u64,
    /// Fetches holding a slot now.
    pub fetches_in_flight: u64,
    /// The most fetches that ever held a slot at once (at most `fetches_in_flight_max`).
    pub fetches_in_flight_peak: u64,
    /// UCX get mode, server side: blocks mapped and leased to a client for one-sided reads.
    pub leases_granted: u64,
    /// `FetchRma` requests answered `Unavailable` because the connection held
    /// `ucx.leases_per_connection_max` leases.
    pub leases_refused: u64,
    /// Leases ended by `fetch_timeout_ms` before the client released them.
    pub leases_expired: u64,
    /// Leases held now (mapped, awaiting release, expiry or the connection's end).
    pub leases_held: u64,
    /// Pushes a peer answered `Stored` (its copy verified, installed and registered).
    pub pushes_ok: u64,
    /// Pushes that ended otherwise (refused, rejected, unreachable, timed out).
    pub pushes_failed: u64,
    /// Pushed blocks this side verified and stored.
    pub pushes_stored: u64,
    /// Pushed blocks this side refused because their bytes hashed to another id (also
    /// counted in `verify_failures`).
    pub pushes_rejected: u64,
    /// Probes a peer answered (held or not).
    pub probes_ok: u64,
    /// Probes that got no answer (unreachable, timed out, broken).
    pub probes_failed: u64,
    /// Probes this side answered.
    pub probes_served: u64,
    /// Channel messages (Raft, control) that got an answer.
    pub messages_ok: u64,
    /// Channel messages that got none (unreachable, timed out, broken, too large).
    pub messages_failed: u64,
    /// Channel messages this side answered.
    pub messages_served: u64,
}

macro_rules! bump {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("Adds one to `", stringify!($name), "`.")]
            pub(crate) fn $name(&self) {
                self.$name.fetch_add(1, Ordering::Relaxed);
            }
        )*
    };
}

impl TransportCounters {
    bump!(
        fetches_ok,
        fetches_failed,
        redials,
        connections_set_aside,
        verify_failures,
        protocol_violations,
        timeouts,
        connections_opened,
        connections_closed,
        handshakes_refused,
        blocks_served,
        not_found_served,
        pushes_ok,
        pushes_failed,
        pushes_stored,
        pushes_rejected,
        probes_ok,
        probes_failed,
        probes_served,
        messages_ok,
        messages_failed,
        messages_served,
    );

    /// Adds received bytes.
    pub(crate) fn add_bytes_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds sent bytes.
    pub(crate) fn add_bytes_out(&self, n: u64) {
        self.bytes_out.fetch_add(n, Ordering::Relaxed);
    }

    /// A fetch took a slot; tracks the peak.
    pub(crate) fn fetch_started(&self) {
        let now = self.fetches_in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.fetches_in_flight_peak
            .fetch_max(now, Ordering::Relaxed);
    }

    /// A fetch gave its slot back.
    pub(crate) fn fetch_ended(&self) {
        self.fetches_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Copies every counter.
    pub fn snapshot(&self) -> CountersSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            fetches_ok: g(&self.fetches_ok),
            fetches_failed: g(&self.fetches_failed),
            redials: g(&self.redials),
            connections_set_aside: g(&self.connections_set_aside),
            verify_failures: g(&self.verify_failures),
            protocol_violations: g(&self.protocol_violations),
            timeouts: g(&self.timeouts),
            connections_opened: g(&self.connections_opened),
            connections_closed: g(&self.connections_closed),
            handshakes_refused: g(&self.handshakes_refused),
            blocks_served: g(&self.blocks_served),
            not_found_served: g(&self.not_found_served),
            bytes_in: g(&self.bytes_in),
            bytes_out: g(&self.bytes_out),
            fetches_in_flight: g(&self.fetches_in_flight),
            fetches_in_flight_peak: g(&self.fetches_in_flight_peak),
            leases_granted: g(&self.leases_granted),
            leases_refused: g(&self.leases_refused),
            leases_expired: g(&self.leases_expired),
            leases_held: g(&self.leases_held),
            pushes_ok: g(&self.pushes_ok),
            pushes_failed: g(&self.pushes_failed),
            pushes_stored: g(&self.pushes_stored),
            pushes_rejected: g(&self.pushes_rejected),
            probes_ok: g(&self.probes_ok),
            probes_failed: g(&self.probes_failed),
            probes_served: g(&self.probes_served),
            messages_ok: g(&self.messages_ok),
            messages_failed: g(&self.messages_failed),
            messages_served: g(&self.messages_served),
        }
    }
}

/// Leases of the UCX transport's get mode (server side).
#[cfg_attr(not(feature = "ucx"), allow(dead_code))]
impl TransportCounters {
    bump!(leases_refused, leases_expired);

    /// A block was mapped and leased.
    pub(crate) fn lease_granted(&self) {
        self.leases_granted.fetch_add(1, Ordering::Relaxed);
        self.leases_held.fetch_add(1, Ordering::Relaxed);
    }

    /// A lease ended (released, expired, or its connection closed).
    pub(crate) fn lease_ended(&self) {
        self.leases_held.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_tracks_the_most_concurrent() {
        let c = TransportCounters::default();
        c.fetch_started();
        c.fetch_started();
        c.fetch_ended();
        c.fetch_started();
        c.fetch_ended();
        let s = c.snapshot();
        assert_eq!(s.fetches_in_flight, 1);
        assert_eq!(s.fetches_in_flight_peak, 2);
    }
}
