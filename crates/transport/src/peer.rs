//! [`PeerAddr`]: how a transport names and reaches another node.
//!
//! A node name (what its certificate is issued to, e.g. `node2`, checked by TLS) and a socket
//! address. QUIC dials the address and checks the name; UCX and RDMA CM connect by IP address
//! too, so one type serves every transport.

use std::fmt;
use std::net::SocketAddr;

/// A peer: its node name (the certificate's subject alternative name) and address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    /// Node name; the peer's certificate must carry it as a DNS name.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl PeerAddr {
    /// A peer named `name` at `addr`.
    pub fn new(name: impl Into<String>, addr: SocketAddr) -> PeerAddr {
        PeerAddr {
            name: name.into(),
            addr,
        }
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.addr)
    }
}

impl fmt::Debug for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
