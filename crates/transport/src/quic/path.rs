//! The path rule: which QUIC settings a connection gets, decided from the peer's address, on
//! both sides (the dialling client picks its config by the address it dials, the server by
//! the address a connection comes from), so the node and the bench follow one rule.
//!
//! - **Loopback** (`127.0.0.0/8`, `::1`, and IPv4-mapped loopback): the configured
//!   [`QuicTuning`] as is. Its defaults are loopback's: 64 KiB datagrams (MTU discovery up to
//!   65,527 bytes, which loopback carries) and no GSO (ten such datagrams would overflow one
//!   GSO send).
//! - **Network** (any other address): datagrams no larger than a real NIC's path allows with
//!   segmentation offload, MTU discovery from the configured initial MTU (1,200 by default,
//!   the RFC 9000 floor every path carries) up to [`GSO_PAYLOAD_BYTES_MAX`] (or the configured
//!   `max_udp_payload_bytes` when lower), and UDP GSO on. Discovery settles on what the path
//!   carries: 1,452–1,472 bytes behind an MTU of 1,500, the 6,550-byte ceiling behind jumbo
//!   frames (quinn batches ten datagrams per GSO send, which must stay within 64 KiB, so a
//!   9,000-byte path uses 6,550-byte datagrams in batches rather than 8,972-byte ones one
//!   system call each).
//!
//! With `quic.adapt_to_path = false` every path gets the configured settings (what a
//! benchmark of fixed settings, or an operator who measured their own path, wants). A node
//! reaching a peer through one of its own non-loopback addresses takes the network settings:
//! correct, slower than loopback's.

use std::net::{IpAddr, SocketAddr};

use crate::config::{QuicTuning, TransportConfig, GSO_PAYLOAD_BYTES_MAX};

/// The two kinds of path the rule tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathKind {
    /// The peer is on this host's loopback interface.
    Loopback,
    /// Any other path: a NIC, a veth pair, a tunnel.
    Network,
}

impl PathKind {
    /// Both kinds, in the order [`PathKind::index`] numbers them.
    pub const ALL: [PathKind; 2] = [PathKind::Loopback, PathKind::Network];

    /// The kind of path to (or from) `peer`.
    pub fn of(peer: SocketAddr) -> PathKind {
        let loopback = match peer.ip() {
            IpAddr::V4(ip) => ip.is_loopback(),
            IpAddr::V6(ip) => {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        };
        if loopback {
            PathKind::Loopback
        } else {
            PathKind::Network
        }
    }

    /// 0 for loopback, 1 for network: an index into per-kind tables.
    pub fn index(self) -> usize {
        match self {
            PathKind::Loopback => 0,
            PathKind::Network => 1,
        }
    }
}

impl QuicTuning {
    /// The settings a connection over a path of `kind` uses (the module docs give the rule).
    pub fn for_path(&self, kind: PathKind) -> QuicTuning {
        if !self.adapt_to_path || kind == PathKind::Loopback {
            return self.clone();
        }
        let max_udp = self.max_udp_payload_bytes.min(GSO_PAYLOAD_BYTES_MAX);
        QuicTuning {
            initial_mtu_bytes: self.initial_mtu_bytes.min(max_udp),
            max_udp_payload_bytes: max_udp,
            mtu_discovery: true,
            segmentation_offload: true,
            ..self.clone()
        }
    }
}

/// `cfg` with its QUIC settings for a path of `kind`.
pub fn config_for_path(cfg: &TransportConfig, kind: PathKind) -> TransportConfig {
    TransportConfig {
        quic: cfg.quic.for_path(kind),
        ..cfg.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_told_from_the_rest() {
        for a in [
            "127.0.0.1:1",
            "127.3.2.1:1",
            "[::1]:1",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(PathKind::of(a.parse().unwrap()), PathKind::Loopback, "{a}");
        }
        for a in [
            "10.0.0.1:1",
            "192.168.1.2:1",
            "[fe80::1]:1",
            "[::ffff:10.0.0.1]:1",
        ] {
            assert_eq!(PathKind::of(a.parse().unwrap()), PathKind::Network, "{a}");
        }
    }

    #[test]
    fn loopback_keeps_the_configured_settings() {
        let t = QuicTuning::default();
        assert_eq!(t.for_path(PathKind::Loopback), t);
        assert_eq!(t.max_udp_payload_bytes, 65_527);
        assert!(!t.segmentation_offload);
    }

    #[test]
    fn a_network_path_gets_gso_sized_datagrams_and_discovery() {
        let n = QuicTuning::default().for_path(PathKind::Network);
        assert_eq!(n.max_udp_payload_bytes, GSO_PAYLOAD_BYTES_MAX);
        assert_eq!(n.initial_mtu_bytes, 1200);
        assert!(n.segmentation_offload && n.mtu_discovery);
        let cfg = TransportConfig {
            quic: n,
            ..TransportConfig::default()
        };
        cfg.validate().expect("the network settings validate");
        // A lower configured ceiling stays.
        let low = QuicTuning {
            max_udp_payload_bytes: 1452,
            ..QuicTuning::default()
        };
        assert_eq!(low.for_path(PathKind::Network).max_udp_payload_bytes, 1452);
    }

    #[test]
    fn adapt_to_path_off_keeps_the_configured_settings_everywhere() {
        let t = QuicTuning {
            adapt_to_path: false,
            ..QuicTuning::default()
        };
        assert_eq!(t.for_path(PathKind::Network), t);
        let cfg = TransportConfig {
            quic: t.clone(),
            ..TransportConfig::default()
        };
        assert_eq!(config_for_path(&cfg, PathKind::Network).quic, t);
    }
}
