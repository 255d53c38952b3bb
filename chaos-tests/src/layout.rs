//! Where each node of a run lives: its HTTP API, its advertised node-to-node addresses (the
//! relays), its real listen addresses, its data directory, and the TOML config that says so.
//!
//! Loopback addressing: node `i` listens on `127.0.2.i` (so the relays recognise its packets
//! by source IP) and is advertised to its peers at `127.0.1.i` (the relay in front of it), on
//! the same ports, as the node's config requires. In namespaces ([`Addressing::Netns`]) node
//! `i` listens on its own address and is advertised at the bridge, where the relays run.
//! Clients reach the HTTP API directly.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};

use anyhow::Context;
use kvfabric_test_support::config::{
    ClusterSection, DiskSection, MemberSection, ModelsSection, NodeConfigFile,
};

/// The tiny MLA model the workload stores (the shared test preset): 6,144 payload bytes per
/// block, so a run moves many blocks on two cores.
pub use kvfabric_test_support::presets::{
    TINY_NAME as MODEL_NAME, TINY_PAYLOAD_BYTES as PAYLOAD_BYTES, TINY_TOKENS as MODEL_TOKENS,
    TINY_TOML as MODEL_TOML,
};

/// Run-wide node settings.
#[derive(Debug, Clone, Copy)]
pub struct NodeSettings {
    /// Copies per acknowledged put.
    pub replication: u32,
    /// Ownership lease.
    pub lease_ms: u64,
}

/// One node's addresses and files.
#[derive(Debug, Clone)]
pub struct NodeLayout {
    /// 1-based id.
    pub id: u64,
    /// HTTP API.
    pub http: SocketAddr,
    /// Block transport as peers dial it (the relay).
    pub transport: SocketAddr,
    /// Raft as peers dial it (the relay).
    pub raft: SocketAddr,
    /// Where the block transport really listens.
    pub transport_listen: SocketAddr,
    /// Where Raft really listens.
    pub raft_listen: SocketAddr,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Config file.
    pub config: PathBuf,
    /// Log file (appended across restarts).
    pub log: PathBuf,
}

impl NodeLayout {
    /// `http://IP:PORT`.
    pub fn api(&self) -> String {
        format!("http://{}", self.http)
    }
}

/// The address node `id` listens on.
pub fn listen_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 2, id as u8))
}

/// The address node `id` is advertised at (its relay).
pub fn advertised_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, id as u8))
}

/// The node a packet's source IP belongs to.
pub fn node_of(ip: IpAddr) -> Option<u64> {
    match ip {
        IpAddr::V4(v) if v.octets()[..3] == [127, 0, 2] => Some(u64::from(v.octets()[3])),
        _ => None,
    }
}

/// Where a run's nodes listen and are advertised.
#[derive(Debug, Clone, Copy)]
pub enum Addressing {
    /// Loopback: node `i` listens on `127.0.2.i`, its relay on `127.0.1.i`.
    Loopback,
    /// Namespaces: node `i` listens on `node_ip(i)` inside its namespace, every relay front
    /// on the bridge address `relay`; HTTP on port [`NETNS_HTTP_PORT`] of the node's address.
    Netns {
        /// First three octets of the subnet.
        subnet: [u8; 3],
        /// The bridge address.
        relay: IpAddr,
    },
}

/// The HTTP port of a node in its own namespace.
pub const NETNS_HTTP_PORT: u16 = 7100;

impl Addressing {
    fn listen(&self, id: u64) -> IpAddr {
        match self {
            Addressing::Loopback => listen_ip(id),
            Addressing::Netns { subnet, .. } => {
                IpAddr::V4(Ipv4Addr::new(subnet[0], subnet[1], subnet[2], id as u8))
            }
        }
    }

    fn advertised(&self, id: u64) -> IpAddr {
        match self {
            Addressing::Loopback => advertised_ip(id),
            Addressing::Netns { relay, .. } => *relay,
        }
    }
}

/// A UDP port free on `front` (and, on loopback, on `listen` too) not in `taken`.
fn free_udp(front: IpAddr, listen: Option<IpAddr>, taken: &[u16]) -> anyhow::Result<u16> {
    for _ in 0..50 {
        let s = UdpSocket::bind(SocketAddr::new(front, 0)).context("finding a free UDP port")?;
        let port = s.local_addr()?.port();
        drop(s);
        if taken.contains(&port) {
            continue;
        }
        if !matches!(listen, Some(ip) if UdpSocket::bind(SocketAddr::new(ip, port)).is_err()) {
            return Ok(port);
        }
    }
    anyhow::bail!("no UDP port free on {front} and the listen address")
}

/// Picks addresses for `nodes` nodes under `dir`.
pub fn plan(dir: &Path, nodes: u32, addressing: Addressing) -> anyhow::Result<Vec<NodeLayout>> {
    let mut taken = Vec::new();
    let mut out = Vec::new();
    for id in 1..=u64::from(nodes) {
        let (listen, front) = (addressing.listen(id), addressing.advertised(id));
        let check = matches!(addressing, Addressing::Loopback).then_some(listen);
        let http = match addressing {
            Addressing::Loopback => TcpListener::bind("127.0.0.1:0")
                .context("finding a free TCP port")?
                .local_addr()?,
            Addressing::Netns { .. } => SocketAddr::new(listen, NETNS_HTTP_PORT),
        };
        let tp = free_udp(front, check, &taken)?;
        taken.push(tp);
        let rp = free_udp(front, check, &taken)?;
        taken.push(rp);
        out.push(NodeLayout {
            id,
            http,
            transport: SocketAddr::new(front, tp),
            raft: SocketAddr::new(front, rp),
            transport_listen: SocketAddr::new(listen, tp),
            raft_listen: SocketAddr::new(listen, rp),
            data_dir: dir.join(format!("node{id}")),
            config: dir.join(format!("node{id}.toml")),
            log: dir.join(format!("node{id}.log")),
        });
    }
    Ok(out)
}

/// The TOML config of `node` in a cluster of `all`; certificates in `dir/certs`, the model in
/// `dir/models`.
pub fn config_text(dir: &Path, node: &NodeLayout, all: &[NodeLayout], s: NodeSettings) -> String {
    let mut c = NodeConfigFile::new(
        node.id,
        &node.http.to_string(),
        node.data_dir.clone(),
        "256 KiB".into(),
    );
    c.node.log_level = Some("info".into());
    // Room for every block a 30-minute run writes (~1 GiB on the busiest node): held blocks
    // are never evicted, so a full disk tier would refuse puts, which is not the fault judged.
    c.tiers.disk = Some(DiskSection::of("2 GiB"));
    c.models = Some(ModelsSection {
        dir: dir.join("models"),
    });
    c.cluster = Some(ClusterSection {
        certs_dir: dir.join("certs"),
        transport_listen: Some(node.transport_listen),
        raft_listen: Some(node.raft_listen),
        replication: Some(s.replication),
        lease_ms: Some(s.lease_ms),
        extra: Default::default(),
        members: all
            .iter()
            .map(|m| MemberSection {
                id: m.id,
                api: m.api(),
                transport: m.transport,
                raft: m.raft,
            })
            .collect(),
    });
    c.to_toml(&format!(
        "Written by kvfabric-chaos; node {} of {}.",
        node.id,
        all.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_name_their_node_and_ports_match() {
        assert_eq!(node_of(listen_ip(3)), Some(3));
        assert_eq!(node_of(advertised_ip(3)), None);
        let dir = std::env::temp_dir().join(format!("kvfc-layout-{}", std::process::id()));
        let l = plan(&dir, 3, Addressing::Loopback).unwrap();
        for n in &l {
            assert_eq!(n.transport.port(), n.transport_listen.port());
            assert_eq!(node_of(n.raft_listen.ip()), Some(n.id));
        }
        let text = config_text(
            &dir,
            &l[1],
            &l,
            NodeSettings {
                replication: 2,
                lease_ms: 4000,
            },
        );
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(back["node"]["id"].as_integer(), Some(2));
        assert_eq!(
            back["cluster"]["raft_listen"].as_str(),
            Some(l[1].raft_listen.to_string().as_str())
        );
    }
}
