//! The node config file (`kvfabric node --config FILE`) as a typed value: every section a
//! writer sets, serialized to TOML through serde. This is the one writer of node configs —
//! `kvfabric cluster up`, the real-process tests and the chaos harness all build a
//! [`NodeConfigFile`] and call [`NodeConfigFile::to_toml`] — so a config is never assembled
//! by hand. The node's own parser (`crates/node/src/config`) reads it back; its tests parse
//! what this writes.
//!
//! Keys a writer leaves `None` (or empty) are not written, so the node's defaults apply.
//! `[cluster]` takes extra keys ([`ClusterSection::extra`], e.g. from `cluster up
//! --cluster-set KEY=VALUE`), checked by the node like any other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A byte quantity: an integer, or a string with a binary unit (`"64 MiB"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Bytes {
    /// A count of bytes.
    Count(u64),
    /// A quantity with a unit, e.g. `"256 MiB"`.
    Text(String),
}

impl From<u64> for Bytes {
    fn from(n: u64) -> Bytes {
        Bytes::Count(n)
    }
}

impl From<&str> for Bytes {
    fn from(s: &str) -> Bytes {
        Bytes::Text(s.to_owned())
    }
}

/// A whole node config.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeConfigFile {
    /// `[node]`.
    pub node: NodeSection,
    /// `[tiers]`.
    pub tiers: TiersSection,
    /// `[models]`: a models directory (else the embedded presets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<ModelsSection>,
    /// `[limits]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSection>,
    /// `[[namespaces]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceSection>,
    /// `[[tenants]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantSection>,
    /// `[events]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<EventsSection>,
    /// `[route]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteSection>,
    /// `[transport]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportSection>,
    /// `[operator]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorSection>,
    /// `[arenas]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arenas: Option<ArenasSection>,
    /// `[cluster]`: a standalone node without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSection>,
}

/// `[transport]` (every key optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TransportSection {
    /// `quic` or `ucx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Any other `[transport]` key (and the `quic`/`ucx` tables), as TOML values.
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

/// `[node]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSection {
    /// The node's id (`n<id>` in the API).
    pub id: u64,
    /// Where the HTTP API listens (`IP:PORT`; port 0 picks one, printed on stdout).
    pub http_listen: String,
    /// The data directory (relative paths resolve against the config file's directory).
    pub data_dir: PathBuf,
    /// A tracing filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// The async runtime's worker threads (default: one per core, at least 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<usize>,
}

/// `[tiers]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TiersSection {
    /// The host RAM arena.
    pub host_bytes: Bytes,
    /// `[tiers.disk]`: no disk tier without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskSection>,
    /// `[tiers.gpu]`: no GPU tier without it (a node needs the `cuda` feature and a device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSection>,
}

/// `[tiers.gpu]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuSection {
    /// Device bytes the tier may use.
    pub bytes: Bytes,
    /// CUDA device ordinal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
    /// A node's own puts go to the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub puts: Option<bool>,
    /// A hit on a host block moves it to the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote: Option<bool>,
}

/// `[tiers.disk]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskSection {
    /// Upper bound on the segment files.
    pub bytes: Bytes,
    /// `deferred` or `every_append`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<String>,
    /// Any other `[tiers.disk]` key, as a TOML value (e.g. `scrub_pause_ms`, from
    /// `cluster up --disk-set`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

impl DiskSection {
    /// A disk tier of `bytes`, every other key left to the node's defaults.
    pub fn of(bytes: impl Into<Bytes>) -> DiskSection {
        DiskSection {
            bytes: bytes.into(),
            sync: None,
            extra: BTreeMap::new(),
        }
    }
}

/// `[models]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelsSection {
    /// Exactly the presets of this directory.
    pub dir: PathBuf,
}

/// `[limits]` (every key optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LimitsSection {
    /// Largest request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<Bytes>,
    /// Open HTTP connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Requests handled at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inflight_requests: Option<u32>,
    /// Chunk keys per lookup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lookup_keys: Option<u32>,
    /// Time to receive a request's headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_read_timeout_ms: Option<u64>,
    /// Time to receive a put's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_read_timeout_ms: Option<u64>,
}

/// One `[[namespaces]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NamespaceSection {
    /// Its name.
    pub name: String,
    /// Readable by every valid token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// One `[[tenants]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantSection {
    /// Its bearer token.
    pub token: String,
    /// The namespace it reads and writes.
    pub namespace: String,
}

/// `[events]` (every key optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EventsSection {
    /// The ZeroMQ PUB endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zmq_pub: Option<String>,
    /// The ZeroMQ ROUTER (replay) endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zmq_replay: Option<String>,
    /// Batches kept for replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_batches: Option<u64>,
    /// Open SSE streams at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sse_subscribers: Option<u32>,
    /// The ZeroMQ topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Any other `[events]` key, as a TOML value (e.g. from `cluster up --events-set`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
}

/// `[arenas]` (every key optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ArenasSection {
    /// Arenas live at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arenas_max: Option<u32>,
    /// Bytes all live arenas hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_max: Option<Bytes>,
}

/// `[route]` (every key optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RouteSection {
    /// Recompute speed, tokens per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens_per_s: Option<f64>,
    /// Gbit/s between nodes until measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_bandwidth_gbps: Option<f64>,
}

/// `[operator]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorSection {
    /// The operator's bearer token.
    pub token: String,
}

/// `[cluster]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterSection {
    /// The certificates directory.
    pub certs_dir: PathBuf,
    /// Where this node's block transport really listens (default: its member entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_listen: Option<SocketAddr>,
    /// Where this node's Raft endpoint really listens (default: its member entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_listen: Option<SocketAddr>,
    /// Copies a put waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<u32>,
    /// The ownership lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// Any other `[cluster]` key, as a TOML value.
    #[serde(flatten)]
    pub extra: BTreeMap<String, toml::Value>,
    /// `[[cluster.members]]`, this node included.
    pub members: Vec<MemberSection>,
}

/// One `[[cluster.members]]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberSection {
    /// Its id.
    pub id: u64,
    /// Its HTTP API (`http://IP:PORT`).
    pub api: String,
    /// Its block transport as peers dial it.
    pub transport: SocketAddr,
    /// Its Raft endpoint as peers dial it.
    pub raft: SocketAddr,
}

impl NodeConfigFile {
    /// A node config with only `[node]` and `[tiers]`.
    pub fn new(id: u64, http_listen: &str, data_dir: PathBuf, host_bytes: Bytes) -> Self {
        NodeConfigFile {
            node: NodeSection {
                id,
                http_listen: http_listen.to_owned(),
                data_dir,
                log_level: None,
                worker_threads: None,
            },
            tiers: TiersSection {
                host_bytes,
                disk: None,
                gpu: None,
            },
            models: None,
            limits: None,
            namespaces: Vec::new(),
            tenants: Vec::new(),
            events: None,
            route: None,
            transport: None,
            operator: None,
            arenas: None,
            cluster: None,
        }
    }

    /// The TOML text, with a comment line on top.
    pub fn to_toml(&self, comment: &str) -> String {
        let body = toml::to_string(self).expect("a node config always serializes");
        format!("# {comment}\n{body}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_config_round_trips_with_its_extra_keys() {
        let mut c = NodeConfigFile::new(2, "127.0.0.1:0", "data".into(), "256 MiB".into());
        c.tiers.disk = Some(DiskSection::of("1 GiB"));
        let member = |id: u64| MemberSection {
            id,
            api: format!("http://127.0.0.1:{}", 7100 + id),
            transport: format!("127.0.0.1:{}", 7200 + id).parse().unwrap(),
            raft: format!("127.0.0.1:{}", 7300 + id).parse().unwrap(),
        };
        let mut extra = BTreeMap::new();
        extra.insert("repair_interval_ms".to_owned(), toml::Value::Integer(500));
        c.cluster = Some(ClusterSection {
            certs_dir: "certs".into(),
            transport_listen: None,
            raft_listen: None,
            replication: Some(2),
            lease_ms: None,
            extra,
            members: (1..=3).map(member).collect(),
        });
        let text = c.to_toml("test");
        assert!(text.starts_with("# test\n"), "{text}");
        let back: toml::Table = toml::from_str(&text).unwrap();
        let cluster = back["cluster"].as_table().unwrap();
        assert_eq!(cluster["repair_interval_ms"].as_integer(), Some(500));
        assert_eq!(cluster["replication"].as_integer(), Some(2));
        assert!(!cluster.contains_key("lease_ms"), "None is not written");
        assert_eq!(cluster["members"].as_array().unwrap().len(), 3);
        assert_eq!(back["tiers"]["host_bytes"].as_str(), Some("256 MiB"));
        assert_eq!(back["tiers"]["disk"]["bytes"].as_str(), Some("1 GiB"));
    }
}
