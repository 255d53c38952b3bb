//! The validated configuration the core runs with: the cluster (members, this node's
//! listeners, replication, leases, repair) and the cost model of routes. Parsing and
//! validating a config file is the node's job; the node builds these.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kvfabric_directory::DirectoryConfig;

use crate::ids::NodeId;

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its id.
    pub id: NodeId,
    /// Its HTTP API (`http://IP:PORT`).
    pub api: String,
    /// Its block transport.
    pub transport: SocketAddr,
    /// Its Raft endpoint.
    pub raft: SocketAddr,
}

impl Member {
    /// The name its certificate carries.
    pub fn cert_name(&self) -> String {
        format!("node{}", self.id.0)
    }
}

/// A validated `[cluster]`.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Where this node's block transport listens.
    pub transport_listen: SocketAddr,
    /// Where this node's Raft endpoint listens.
    pub raft_listen: SocketAddr,
    /// The certificates directory.
    pub certs_dir: PathBuf,
    /// Development only: generate a CA and every member's certificate into `certs_dir` at
    /// start when it holds none (the first member to start writes them, under a lock).
    pub generate_dev_certs: bool,
    /// This node's certificate name.
    pub cert_name: String,
    /// Copies a put waits for, this node's included.
    pub replication: u32,
    /// Period of lease renewals.
    pub lease_renew: Duration,
    /// Period of the re-replication pass (`None`: off).
    pub repair_interval: Option<Duration>,
    /// Most blocks one re-replication pass repairs.
    pub repair_blocks_max: usize,
    /// Every member, by id.
    pub members: Vec<Member>,
    /// The directory's bounds.
    pub directory: DirectoryConfig,
    /// The block transport and the bounds of the node's endpoint (`[transport]`).
    pub transport: TransportSettings,
    /// How long one exchange with a peer may take, and when a silent one is hedged or
    /// probed.
    pub failover: FailoverConfig,
}

/// How a member tells a dead peer from a slow one: the bound on one exchange with one peer,
/// the wait before the next candidate is tried beside a silent one, and the probing of
/// suspects. See `docs/API.md`, "Failover".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverConfig {
    /// Bound on one exchange with one peer: pushing a copy, fetching or probing an owner. A
    /// peer that does not answer within it is suspected.
    pub attempt_ms: u64,
    /// After this long without an answer, the next owner is asked beside a silent one (reads;
    /// a push gets company only once its peer is suspected, `suspect_ms`).
    pub hedge_ms: u64,
    /// After this long without an answer, a peer is suspected (its attempt goes on; an answer
    /// clears it).
    pub suspect_ms: u64,
    /// First probe of a suspect this long after it was suspected.
    pub probe_ms: u64,
    /// Longest wait between two probes of a suspect (the wait doubles up to it).
    pub probe_ms_max: u64,
}

/// Default bound on one exchange with one peer.
pub const ATTEMPT_MS_DEFAULT: u64 = 2_000;
/// Default silence after which a peer is suspected.
pub const SUSPECT_MS_DEFAULT: u64 = 400;
/// Default wait before a silent candidate is hedged.
pub const HEDGE_MS_DEFAULT: u64 = 150;
/// Default first probe of a suspect.
pub const PROBE_MS_DEFAULT: u64 = 250;
/// Default longest wait between probes.
pub const PROBE_MS_MAX_DEFAULT: u64 = 2_000;

impl Default for FailoverConfig {
    fn default() -> FailoverConfig {
        FailoverConfig {
            attempt_ms: ATTEMPT_MS_DEFAULT,
            hedge_ms: HEDGE_MS_DEFAULT,
            suspect_ms: SUSPECT_MS_DEFAULT,
            probe_ms: PROBE_MS_DEFAULT,
            probe_ms_max: PROBE_MS_MAX_DEFAULT,
        }
    }
}

/// Which transport carries blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockTransport {
    /// QUIC on the node's one endpoint (the member's `transport` address), with Raft and
    /// control beside it.
    #[default]
    Quic,
    /// UCX at the member's `transport` address (trusted fabrics: no TLS); Raft and control
    /// on a QUIC endpoint at its `raft` address.
    Ucx,
}

/// The validated `[transport]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransportSettings {
    /// What carries blocks.
    pub kind: BlockTransport,
    /// Bounds, timeouts and tuning of the transports (QUIC's and, with `kind = "ucx"`,
    /// UCX's).
    pub config: kvfabric_transport::TransportConfig,
}

impl ClusterConfig {
    /// The member with `id`.
    pub fn member(&self, id: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }
}

/// Default recompute speed, tokens per second.
pub const PREFILL_TOKENS_PER_S_DEFAULT: f64 = 8_000.0;
/// Default node-to-node bandwidth, Gbit/s.
pub const DEFAULT_BANDWIDTH_GBPS_DEFAULT: f64 = 10.0;
/// Default read-back bandwidth of the gpu tier, Gbit/s.
pub const GPU_READ_GBPS_DEFAULT: f64 = 8_000.0;
/// Default read-back bandwidth of the host tier, Gbit/s (10 GB/s).
pub const HOST_READ_GBPS_DEFAULT: f64 = 80.0;
/// Default read-back bandwidth of the disk tier, Gbit/s (2 GB/s).
pub const DISK_READ_GBPS_DEFAULT: f64 = 16.0;

/// The validated `[route]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteConfig {
    /// Tokens per second an engine prefills (recomputes) at.
    pub prefill_tokens_per_s: f64,
    /// Gbit/s between two nodes never measured.
    pub default_bandwidth_gbps: f64,
    /// Gbit/s reading a block back from the gpu tier.
    pub gpu_read_gbps: f64,
    /// Gbit/s reading a block back from the host tier.
    pub host_read_gbps: f64,
    /// Gbit/s reading a block back from the disk tier.
    pub disk_read_gbps: f64,
}

impl Default for RouteConfig {
    fn default() -> RouteConfig {
        RouteConfig {
            prefill_tokens_per_s: PREFILL_TOKENS_PER_S_DEFAULT,
            default_bandwidth_gbps: DEFAULT_BANDWIDTH_GBPS_DEFAULT,
            gpu_read_gbps: GPU_READ_GBPS_DEFAULT,
            host_read_gbps: HOST_READ_GBPS_DEFAULT,
            disk_read_gbps: DISK_READ_GBPS_DEFAULT,
        }
    }
}
