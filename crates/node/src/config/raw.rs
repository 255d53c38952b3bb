//! The config file as written: serde structs that reject unknown keys. Nothing here is
//! checked beyond its type; [`super::validate`] turns a [`RawConfig`] into a
//! [`super::NodeConfig`].

use std::path::PathBuf;

use serde::Deserialize;

use super::bytes::ByteSize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) node: RawNode,
    pub(crate) tiers: RawTiers,
    #[serde(default)]
    pub(crate) models: Option<RawModels>,
    #[serde(default)]
    pub(crate) limits: RawLimits,
    #[serde(default)]
    pub(crate) namespaces: Vec<RawNamespace>,
    #[serde(default)]
    pub(crate) tenants: Vec<RawTenant>,
    #[serde(default)]
    pub(crate) cluster: Option<RawCluster>,
    #[serde(default)]
    pub(crate) events: RawEvents,
    #[serde(default)]
    pub(crate) route: RawRoute,
    #[serde(default)]
    pub(crate) transport: RawTransport,
    #[serde(default)]
    pub(crate) operator: Option<RawOperator>,
    #[serde(default)]
    pub(crate) arenas: RawArenas,
}

/// `[node]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNode {
    pub(crate) id: u64,
    pub(crate) http_listen: String,
    pub(crate) data_dir: PathBuf,
    #[serde(default)]
    pub(crate) log_level: Option<String>,
    #[serde(default)]
    pub(crate) namespace_secret: Option<PathBuf>,
    #[serde(default)]
    pub(crate) worker_threads: Option<usize>,
}

/// `[tiers]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTiers {
    pub(crate) host_bytes: ByteSize,
    #[serde(default)]
    pub(crate) disk: Option<RawDisk>,
    #[serde(default)]
    pub(crate) gpu: Option<RawGpu>,
}

/// `[tiers.disk]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDisk {
    pub(crate) bytes: ByteSize,
    #[serde(default)]
    pub(crate) sync: Option<String>,
    #[serde(default)]
    pub(crate) scrub_bytes_per_s: Option<ByteSize>,
    #[serde(default)]
    pub(crate) scrub_pause_ms: Option<u64>,
}

/// `[tiers.gpu]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGpu {
    #[serde(default)]
    pub(crate) ordinal: u32,
    pub(crate) bytes: ByteSize,
    /// A node's own puts go to the device (default true).
    pub(crate) puts: Option<bool>,
    /// A hit on a host block moves it to the device (default true).
    pub(crate) promote: Option<bool>,
}

/// `[models]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModels {
    pub(crate) dir: PathBuf,
}

/// `[limits]`; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub(crate) max_body_bytes: Option<ByteSize>,
    pub(crate) max_connections: Option<u32>,
    pub(crate) max_inflight_requests: Option<u32>,
    pub(crate) max_lookup_keys: Option<u32>,
    pub(crate) header_read_timeout_ms: Option<u64>,
    pub(crate) body_read_timeout_ms: Option<u64>,
}

/// One `[[namespaces]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNamespace {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) shared: bool,
}

/// One `[[tenants]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTenant {
    pub(crate) token: String,
    pub(crate) namespace: String,
}

/// `[cluster]`: absent on a standalone node.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    #[serde(default)]
    pub(crate) transport_listen: Option<String>,
    #[serde(default)]
    pub(crate) raft_listen: Option<String>,
    pub(crate) certs_dir: PathBuf,
    #[serde(default)]
    pub(crate) generate_dev_certs: Option<bool>,
    #[serde(default)]
    pub(crate) cert_name: Option<String>,
    #[serde(default)]
    pub(crate) replication: Option<u32>,
    #[serde(default)]
    pub(crate) lease_ms: Option<u64>,
    #[serde(default)]
    pub(crate) lease_renew_ms: Option<u64>,
    #[serde(default)]
    pub(crate) batch_records_max: Option<usize>,
    #[serde(default)]
    pub(crate) repair_interval_ms: Option<u64>,
    #[serde(default)]
    pub(crate) repair_blocks_max: Option<usize>,
    #[serde(default)]
    pub(crate) attempt_ms: Option<u64>,
    #[serde(default)]
    pub(crate) hedge_ms: Option<u64>,
    #[serde(default)]
    pub(crate) suspect_ms: Option<u64>,
    #[serde(default)]
    pub(crate) probe_ms: Option<u64>,
    #[serde(default)]
    pub(crate) probe_ms_max: Option<u64>,
    #[serde(default)]
    pub(crate) rpc_timeout_ms: Option<u64>,
    #[serde(default)]
    pub(crate) batch_delay_ms_max: Option<u64>,
    #[serde(default)]
    pub(crate) batch_inflight_max: Option<usize>,
    #[serde(default)]
    pub(crate) preappend: Option<bool>,
    #[serde(default)]
    pub(crate) heartbeat_interval_ms: Option<u64>,
    #[serde(default)]
    pub(crate) election_timeout_min_ms: Option<u64>,
    #[serde(default)]
    pub(crate) election_timeout_max_ms: Option<u64>,
    pub(crate) members: Vec<RawMember>,
}

/// One `[[cluster.members]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMember {
    pub(crate) id: u64,
    pub(crate) api: String,
    pub(crate) transport: String,
    pub(crate) raft: String,
}

/// `[events]`; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEvents {
    pub(crate) zmq_pub: Option<String>,
    pub(crate) zmq_replay: Option<String>,
    pub(crate) ring_batches: Option<u64>,
    pub(crate) max_sse_subscribers: Option<u32>,
    pub(crate) topic: Option<String>,
    pub(crate) cluster_feed: Option<bool>,
    pub(crate) cluster_zmq_pub: Option<String>,
    pub(crate) cluster_zmq_replay: Option<String>,
}

/// `[route]`: the cost model of `POST /v1/route`; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub(crate) prefill_tokens_per_s: Option<f64>,
    pub(crate) default_bandwidth_gbps: Option<f64>,
    pub(crate) gpu_read_gbps: Option<f64>,
    pub(crate) host_read_gbps: Option<f64>,
    pub(crate) disk_read_gbps: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTransport {
    pub(crate) kind: Option<String>,
    pub(crate) max_frame_bytes: Option<ByteSize>,
    pub(crate) fetches_in_flight_max: Option<usize>,
    pub(crate) serve_streams_max: Option<u32>,
    pub(crate) connections_max: Option<usize>,
    pub(crate) connect_timeout_ms: Option<u64>,
    pub(crate) fetch_timeout_ms: Option<u64>,
    pub(crate) request_timeout_ms: Option<u64>,
    pub(crate) idle_timeout_ms: Option<u64>,
    pub(crate) keep_alive_ms: Option<u64>,
    #[serde(default)]
    pub(crate) quic: RawQuic,
    #[serde(default)]
    pub(crate) ucx: RawUcx,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuic {
    pub(crate) initial_mtu_bytes: Option<u16>,
    pub(crate) max_udp_payload_bytes: Option<u16>,
    pub(crate) mtu_discovery: Option<bool>,
    pub(crate) segmentation_offload: Option<bool>,
    pub(crate) stream_receive_window_bytes: Option<ByteSize>,
    pub(crate) connection_receive_window_bytes: Option<ByteSize>,
    pub(crate) send_window_bytes: Option<ByteSize>,
    pub(crate) send_fairness: Option<bool>,
    pub(crate) socket_buffer_bytes: Option<ByteSize>,
    pub(crate) initial_rtt_ms: Option<u64>,
    pub(crate) join_sends: Option<bool>,
    pub(crate) adapt_to_path: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUcx {
    pub(crate) tls: Option<String>,
    pub(crate) mode: Option<String>,
    pub(crate) recv_chunk_bytes: Option<ByteSize>,
    pub(crate) recv_chunks_posted: Option<usize>,
    pub(crate) leases_per_connection_max: Option<usize>,
    pub(crate) stage_leases: Option<bool>,
}

/// `[operator]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOperator {
    pub(crate) token: String,
}

/// `[arenas]`: bounds of the per-request arenas; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawArenas {
    pub(crate) arenas_max: Option<u32>,
    pub(crate) bytes_max: Option<ByteSize>,
}
