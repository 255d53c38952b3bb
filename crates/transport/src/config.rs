//! [`TransportConfig`]: every bound the transport keeps, with defaults and a `validate()` that
//! checks fields against each other.
//!
//! Memory is bounded by these numbers alone. A client holds at most
//! `fetches_in_flight_max × max_frame_bytes` of destination buffers plus, per connection, what
//! the peer may send ahead of reads (`quic.connection_receive_window_bytes`). A server holds
//! per connection at most `quic.send_window_bytes` of unacknowledged data plus references to
//! the blocks of at most `serve_streams_max` streams (shared with the source, not copied).
//! The UCX transport's client holds `ucx.recv_chunk_bytes × ucx.recv_chunks_posted` of receive
//! buffers per connection; its server, per connection, references to the blocks of at most
//! `serve_streams_max` requests ([`UcxTuning`]). In UCX get mode a client's gets land in the
//! fetch's own destination buffer; a server holds at most `ucx.leases_per_connection_max`
//! leased blocks per connection (with `ucx.stage_leases`, each in a UCX shared-memory region
//! of the block's size rounded up to 1 MiB, and as many idle regions kept for reuse).

mod ucx;

use std::time::Duration;

use crate::error::TransportError;

pub use ucx::{
    UcxMode, UcxTuning, LEASES_PER_CONNECTION_MAX, RECV_CHUNKS_POSTED_MAX, RECV_CHUNK_BYTES_MAX,
    RECV_CHUNK_BYTES_MIN, UCX_SETTINGS_MAX,
};

/// Hard ceiling on `max_frame_bytes`: far above any block, far below `usize::MAX` on 64-bit.
pub const FRAME_BYTES_CEILING: u64 = 1 << 30;

/// Largest `max_udp_payload_bytes` that UDP GSO can be combined with: quinn batches up to
/// ten datagrams per send, and the kernel refuses a GSO send whose IP packet (IPv4: 20-byte
/// header, 8-byte UDP header, the ten payloads) exceeds 65,535 bytes; 10 × 6,550 + 28 fits
/// (6,553, the figure before headers, failed every batch on a 9,000-byte veth path).
pub const GSO_PAYLOAD_BYTES_MAX: u16 = 6_550;

/// The bounds of one transport instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// Largest block (header ‖ payload) sent or accepted; larger frames are refused.
    pub max_frame_bytes: u64,
    /// Fetches in flight across all peers at once; further fetches wait for a slot.
    pub fetches_in_flight_max: usize,
    /// Block streams one client connection may have open on this server at once.
    pub serve_streams_max: u32,
    /// Peers with an open client connection at once (each costs a receive window).
    pub connections_max: usize,
    /// Bound on establishing a connection (handshake included).
    pub connect_timeout_ms: u64,
    /// Bound on one whole fetch from one peer: slot wait, connect, request, all bytes.
    pub fetch_timeout_ms: u64,
    /// Bound on a server waiting for a request header once a stream is open.
    pub request_timeout_ms: u64,
    /// A connection silent this long is closed (QUIC idle timeout).
    pub idle_timeout_ms: u64,
    /// Keep-alive interval on idle connections; below `idle_timeout_ms`.
    pub keep_alive_ms: u64,
    /// QUIC-specific tuning.
    pub quic: QuicTuning,
    /// UCX-specific tuning (used only by the `ucx` feature's transport).
    pub ucx: UcxTuning,
}

/// QUIC knobs that decide throughput (see the crate docs for what mattered and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicTuning {
    /// First UDP payload size tried (RFC 9000 floor is 1200).
    pub initial_mtu_bytes: u16,
    /// Largest UDP payload sent or received; the ceiling MTU discovery searches up to.
    /// Loopback carries 65,527; Ethernet with jumbo frames about 8,952; plain Ethernet 1,452.
    pub max_udp_payload_bytes: u16,
    /// Search for the largest payload the path carries (DPLPMTUD).
    pub mtu_discovery: bool,
    /// Hand the kernel batches of datagrams in one call (UDP GSO), where it supports it. Only
    /// with `max_udp_payload_bytes` ≤ [`GSO_PAYLOAD_BYTES_MAX`]: quinn 0.11 batches up to ten
    /// datagrams of the path MTU, and a batch over the kernel's 64 KiB GSO limit fails to
    /// send, which quinn reads as a black hole and drops the MTU to 1,200 bytes.
    pub segmentation_offload: bool,
    /// Bytes one stream may receive ahead of the reader.
    pub stream_receive_window_bytes: u64,
    /// Bytes one connection may receive ahead of the readers, across its streams.
    pub connection_receive_window_bytes: u64,
    /// Unacknowledged bytes one connection may have in flight.
    pub send_window_bytes: u64,
    /// Interleave the streams of a connection packet by packet (quinn's default). Off, a
    /// connection sends one block's stream to the end before the next, so blocks arrive
    /// whole and in order, each hashed while the next one streams in.
    pub send_fairness: bool,
    /// Kernel socket send and receive buffers asked for (capped by `net.core.*mem_max`);
    /// 0 keeps the OS default.
    pub socket_buffer_bytes: usize,
    /// The round-trip time assumed before a connection has measured one, in ms: an
    /// unanswered Initial or Handshake packet is sent again after three times this
    /// (doubling each time). RFC 9002 suggests 333 ms for an unknown path, so a dial whose
    /// first packet is lost (a peer restarting, a path back after a partition) sends its
    /// second after 999 ms, past the node's 1 s dial bound; between cluster members a round
    /// trip is well under 10 ms, and at 10 the Initial is sent again at 30, 90, 210, 450 and
    /// 930 ms. Once the handshake has a sample the estimate is measured, not assumed.
    pub initial_rtt_ms: u64,
    /// Join a connection's consecutive full batches of datagrams into one GSO send of up to
    /// 64 KiB (`quic::coalesce`): quinn 0.11's driver hands the socket ten datagrams at a
    /// time, a bound at MTU 1500. Off: each batch is its own send, as in stock quinn.
    pub join_sends: bool,
    /// Adapt the datagram size and GSO to each connection's path (`quic::path`): the settings
    /// above on loopback; on any other path datagrams of at most [`GSO_PAYLOAD_BYTES_MAX`]
    /// found by MTU discovery, with GSO. Off: the settings above on every path.
    pub adapt_to_path: bool,
}

impl Default for QuicTuning {
    fn default() -> QuicTuning {
        QuicTuning {
            initial_mtu_bytes: 1200,
            max_udp_payload_bytes: 65_527,
            mtu_discovery: true,
            segmentation_offload: false,
            stream_receive_window_bytes: 8 << 20,
            connection_receive_window_bytes: 32 << 20,
            send_window_bytes: 32 << 20,
            send_fairness: false,
            socket_buffer_bytes: 4 << 20,
            initial_rtt_ms: 10,
            join_sends: true,
            adapt_to_path: true,
        }
    }
}

impl Default for TransportConfig {
    fn default() -> TransportConfig {
        TransportConfig {
            // A DeepSeek-V3 BF16 block is 4.5 MB; V4 hybrid blocks are smaller.
            max_frame_bytes: 64 << 20,
            fetches_in_flight_max: 16,
            serve_streams_max: 32,
            connections_max: 256,
            connect_timeout_ms: 5_000,
            fetch_timeout_ms: 30_000,
            request_timeout_ms: 5_000,
            idle_timeout_ms: 30_000,
            keep_alive_ms: 10_000,
            quic: QuicTuning::default(),
            ucx: UcxTuning::default(),
        }
    }
}

fn bad(field: &'static str, reason: String) -> Result<(), TransportError> {
    Err(TransportError::Config { field, reason })
}

impl TransportConfig {
    /// Checks each field's range and the relations between fields.
    pub fn validate(&self) -> Result<(), TransportError> {
        let q = &self.quic;
        if self.max_frame_bytes == 0 || self.max_frame_bytes > FRAME_BYTES_CEILING {
            return bad(
                "max_frame_bytes",
                format!(
                    "expected 1..={FRAME_BYTES_CEILING}, found {}",
                    self.max_frame_bytes
                ),
            );
        }
        if !(1..=4096).contains(&self.fetches_in_flight_max) {
            return bad(
                "fetches_in_flight_max",
                format!("expected 1..=4096, found {}", self.fetches_in_flight_max),
            );
        }
        if !(1..=4096).contains(&self.serve_streams_max) {
            return bad(
                "serve_streams_max",
                format!("expected 1..=4096, found {}", self.serve_streams_max),
            );
        }
        if self.connections_max == 0 {
            return bad("connections_max", "expected at least 1, found 0".into());
        }
        for (field, v) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("fetch_timeout_ms", self.fetch_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("keep_alive_ms", self.keep_alive_ms),
        ] {
            if v == 0 || v > 3_600_000 {
                return bad(field, format!("expected 1..=3600000 ms, found {v}"));
            }
        }
        if self.keep_alive_ms >= self.idle_timeout_ms {
            return bad(
                "keep_alive_ms",
                format!(
                    "expected below idle_timeout_ms ({}), found {}",
                    self.idle_timeout_ms, self.keep_alive_ms
                ),
            );
        }
        if self.connect_timeout_ms > self.fetch_timeout_ms {
            return bad(
                "connect_timeout_ms",
                format!(
                    "expected at most fetch_timeout_ms ({}), found {}",
                    self.fetch_timeout_ms, self.connect_timeout_ms
                ),
            );
        }
        if !(1..=10_000).contains(&q.initial_rtt_ms) {
            return bad(
                "quic.initial_rtt_ms",
                format!("expected 1..=10000 ms, found {}", q.initial_rtt_ms),
            );
        }
        if q.initial_mtu_bytes < 1200 || q.initial_mtu_bytes > q.max_udp_payload_bytes {
            return bad(
                "quic.initial_mtu_bytes",
                format!(
                    "expected 1200..=max_udp_payload_bytes ({}), found {}",
                    q.max_udp_payload_bytes, q.initial_mtu_bytes
                ),
            );
        }
        if q.max_udp_payload_bytes > 65_527 {
            return bad(
                "quic.max_udp_payload_bytes",
                format!("expected at most 65527, found {}", q.max_udp_payload_bytes),
            );
        }
        if q.segmentation_offload && q.max_udp_payload_bytes > GSO_PAYLOAD_BYTES_MAX {
            return bad(
                "quic.segmentation_offload",
                format!(
                    "expected off with max_udp_payload_bytes above {GSO_PAYLOAD_BYTES_MAX} \
                     (ten datagrams must fit one 64 KiB GSO send), found on with {}",
                    q.max_udp_payload_bytes
                ),
            );
        }
        if q.stream_receive_window_bytes == 0
            || q.stream_receive_window_bytes > q.connection_receive_window_bytes
        {
            return bad(
                "quic.stream_receive_window_bytes",
                format!(
                    "expected 1..=connection_receive_window_bytes ({}), found {}",
                    q.connection_receive_window_bytes, q.stream_receive_window_bytes
                ),
            );
        }
        if q.connection_receive_window_bytes > (1 << 32) {
            return bad(
                "quic.connection_receive_window_bytes",
                format!(
                    "expected at most 4 GiB, found {}",
                    q.connection_receive_window_bytes
                ),
            );
        }
        if q.send_window_bytes == 0 || q.send_window_bytes > (1 << 32) {
            return bad(
                "quic.send_window_bytes",
                format!("expected 1..=4 GiB, found {}", q.send_window_bytes),
            );
        }
        self.ucx.validate()
    }

    /// `fetch_timeout_ms` as a duration.
    pub fn fetch_timeout(&self) -> Duration {
        Duration::from_millis(self.fetch_timeout_ms)
    }

    /// `connect_timeout_ms` as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// `request_timeout_ms` as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(c: &TransportConfig) -> &'static str {
        match c.validate() {
            Err(TransportError::Config { field, .. }) => field,
            other => panic!("expected a config error, found {other:?}"),
        }
    }

    #[test]
    fn defaults_validate() {
        TransportConfig::default()
            .validate()
            .expect("defaults are valid");
    }

    #[test]
    fn each_bound_is_checked() {
        let d = TransportConfig::default();
        let mut c = d.clone();
        c.max_frame_bytes = FRAME_BYTES_CEILING + 1;
        assert_eq!(field_of(&c), "max_frame_bytes");
        let mut c = d.clone();
        c.fetches_in_flight_max = 0;
        assert_eq!(field_of(&c), "fetches_in_flight_max");
        let mut c = d.clone();
        c.fetch_timeout_ms = 0;
        assert_eq!(field_of(&c), "fetch_timeout_ms");
        let mut c = d.clone();
        c.quic.max_udp_payload_bytes = 65_528;
        assert_eq!(field_of(&c), "quic.max_udp_payload_bytes");
    }

    #[test]
    fn fields_are_checked_against_each_other() {
        let d = TransportConfig::default();
        let mut c = d.clone();
        c.keep_alive_ms = c.idle_timeout_ms;
        assert_eq!(field_of(&c), "keep_alive_ms");
        let mut c = d.clone();
        c.connect_timeout_ms = c.fetch_timeout_ms + 1;
        assert_eq!(field_of(&c), "connect_timeout_ms");
        let mut c = d.clone();
        c.quic.stream_receive_window_bytes = c.quic.connection_receive_window_bytes + 1;
        assert_eq!(field_of(&c), "quic.stream_receive_window_bytes");
        let mut c = d.clone();
        c.quic.segmentation_offload = true;
        assert_eq!(field_of(&c), "quic.segmentation_offload");
        c.quic.max_udp_payload_bytes = 1472;
        c.quic.initial_mtu_bytes = 1200;
        assert!(
            c.validate().is_ok(),
            "GSO with Ethernet-sized datagrams is fine"
        );
        let mut c = d;
        c.quic.initial_mtu_bytes = 9000;
        c.quic.max_udp_payload_bytes = 1500;
        assert_eq!(field_of(&c), "quic.initial_mtu_bytes");
    }

    #[test]
    fn errors_say_expected_and_found() {
        let c = TransportConfig {
            fetches_in_flight_max: 5000,
            ..TransportConfig::default()
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(msg.contains("expected 1..=4096, found 5000"), "{msg}");
    }
}
