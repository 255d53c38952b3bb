//! The node config (`kvfabric node --config FILE`): schema, loading and validation.
//!
//! Unknown keys are rejected; every error names the file, the dotted key and the reason
//! ([`ConfigError`]). Relative paths are resolved against the directory of the config file.
//! Byte quantities are integers or strings with a binary unit (`"64 MiB"`).
//!
//! ```toml
//! [node]
//! id = 1                            # 1 to 2^32, unique per cluster; shown as `n1` in the API
//! http_listen = "127.0.0.1:7101"    # IP:PORT of the HTTP API (port 0: any free port; the
//!                                   # node prints the address it bound on stdout)
//! data_dir = "/tmp/kvfabric/node1"  # owned by this node; the disk tier lives in data_dir/disk
//! log_level = "info"                # optional, a tracing filter; RUST_LOG overrides it
//! namespace_secret = "…"            # optional: the namespace secret file (secret.rs); default
//!                                   # certs_dir/namespace-secret.toml on a cluster member,
//!                                   # data_dir/namespace-secret.toml standalone
//! worker_threads = 4                # optional: the async runtime's worker threads, 1 to 1024;
//!                                   # default one per core the process may use, at least 2
//!                                   # (cap it on a host shared with an engine or other nodes)
//!
//! [tiers]
//! host_bytes = "1 GiB"              # host RAM arena; at least the smallest storable block
//! [tiers.disk]                      # optional: no disk tier without it
//! bytes = "8 GiB"                   # upper bound on the segment files
//! sync = "deferred"                 # optional: deferred (default) | every_append
//! scrub_bytes_per_s = "16 MiB"      # optional: background verification's read rate; 0: off
//! scrub_pause_ms = 10000            # optional: between two scrub passes (at least 100)
//! [tiers.gpu]                       # optional; needs a build with the `cuda` feature
//! ordinal = 0                       # optional, default 0
//! bytes = "16 GiB"
//! puts = true                       # optional: a node's own puts go to the device (default)
//! promote = true                    # optional: a hit on a host block moves it up (default)
//!
//! [models]                          # optional: the embedded presets by default
//! dir = "models"                    # exactly the presets in this directory (*.toml)
//!
//! [limits]                          # optional, every key optional
//! max_body_bytes = "5 MiB"          # default: the largest storable block + its 64-byte header
//! max_connections = 256             # open HTTP connections (accepting waits beyond)
//! max_inflight_requests = 64        # requests being handled (503 `overloaded` beyond)
//! max_lookup_keys = 1024            # chunk keys per POST /v1/lookup
//! header_read_timeout_ms = 10000    # to receive a request's headers
//! body_read_timeout_ms = 60000      # to receive a put's body
//!
//! [[namespaces]]                    # tenancy; none declared: one open namespace, no tokens
//! name = "team-a"                   # a-z 0-9 . - _, at most 64 characters
//! shared = false                    # true: readable by every valid token
//!
//! [[tenants]]
//! token = "…"                       # bearer token, 16 to 256 visible ASCII characters
//! namespace = "team-a"              # a declared namespace: this token reads and writes it
//!
//! [events]                          # optional, every key optional; see events.rs
//! zmq_pub = "tcp://127.0.0.1:5557"  # vLLM-compatible ZeroMQ PUB socket; off by default
//! [route]                           # optional: the cost model of POST /v1/route (route.rs)
//! prefill_tokens_per_s = 8000       # recompute speed: a miss costs block_tokens / this
//! default_bandwidth_gbps = 10       # Gbit/s between two nodes until a fetch measured it
//! gpu_read_gbps = 8000              # Gbit/s reading a hit back from each tier
//! host_read_gbps = 80
//! disk_read_gbps = 16
//!
//! [operator]                        # optional: who sees the dashboard, changes membership
//! token = "…"                       # (operator.rs)
//! [arenas]                          # optional: per-request arenas of hybrid models (arenas.rs)
//! arenas_max = 64                   # live at once
//! bytes_max = "1 GiB"               # held by all of them together
//!
//! [cluster]                         # optional: standalone without it; every key in cluster.rs
//! certs_dir = "/tmp/kvfabric/certs" # from `kvfabric certs --out DIR --nodes N`
//! replication = 2                   # optional: copies a put waits for
//! [[cluster.members]]               # every member, this node included
//! id = 1
//! api = "http://127.0.0.1:7101"
//! transport = "127.0.0.1:7201"
//! raft = "127.0.0.1:7301"
//! ```

mod arenas;
mod bytes;
mod cluster;
pub(crate) mod events;
mod operator;
mod raw;
mod route;
mod secret;
mod transport;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kvfabric_store::arena::ArenaLimits;
use kvfabric_store::{ConfigError, StoreConfig};

use kvfabric_core::presets::Catalog;
use kvfabric_core::NodeId;

pub(crate) use events::EventsConfig;
pub(crate) use kvfabric_core::config::{ClusterConfig, RouteConfig};
pub(crate) use operator::OperatorToken;
pub(crate) use secret::SecretSource;

/// Largest config file read, in bytes.
pub(crate) const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// A validated node config.
#[derive(Debug)]
pub(crate) struct NodeConfig {
    /// The file it came from (for messages).
    pub(crate) file: String,
    /// This node's id.
    pub(crate) node_id: NodeId,
    /// Where the HTTP API listens.
    pub(crate) http_listen: SocketAddr,
    /// The node's data directory (absolute or relative to the working directory).
    pub(crate) data_dir: PathBuf,
    /// Default tracing filter.
    pub(crate) log_level: String,
    /// Worker threads of the node's async runtime.
    pub(crate) worker_threads: usize,
    /// The store's tiers.
    pub(crate) store: StoreConfig,
    /// The disk tier's background verification; `None`: no disk tier, or turned off.
    pub(crate) scrub: Option<kvfabric_core::local::scrub::ScrubConfig>,
    /// Request limits.
    pub(crate) limits: Limits,
    /// Declared namespaces, in file order.
    pub(crate) namespaces: Vec<NamespaceDecl>,
    /// Tenants (token → namespace index into `namespaces`), in file order.
    pub(crate) tenants: Vec<TenantDecl>,
    /// The cluster this node is a member of; `None`: standalone.
    pub(crate) cluster: Option<ClusterConfig>,
    /// The event stream (`[events]`).
    pub(crate) events: EventsConfig,
    /// The cost model of `POST /v1/route`.
    pub(crate) route: RouteConfig,
    /// The operator's token (`[operator]`), if any.
    pub(crate) operator: Option<OperatorToken>,
    /// Bounds of the per-request arenas (`[arenas]`).
    pub(crate) arenas: ArenaLimits,
    /// Where the namespace secret is read (`node.namespace_secret`).
    pub(crate) namespace_secret: SecretSource,
}

/// Bounds on what the HTTP API accepts.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// Largest request body.
    pub(crate) max_body_bytes: u64,
    /// Open connections.
    pub(crate) max_connections: u32,
    /// Requests handled at once.
    pub(crate) max_inflight_requests: u32,
    /// Chunk keys per lookup.
    pub(crate) max_lookup_keys: u32,
    /// Time to receive a request's headers.
    pub(crate) header_read_timeout: Duration,
    /// Time to receive a put's body.
    pub(crate) body_read_timeout: Duration,
}

/// One declared namespace.
#[derive(Debug, Clone)]
pub(crate) struct NamespaceDecl {
    /// Its name (the namespace key derives from it and the namespace secret).
    pub(crate) name: String,
    /// Readable by every valid token.
    pub(crate) shared: bool,
}

/// One tenant.
#[derive(Clone)]
pub(crate) struct TenantDecl {
    /// Its bearer token.
    pub(crate) token: String,
    /// Index of its namespace in [`NodeConfig::namespaces`].
    pub(crate) namespace: usize,
}

impl std::fmt::Debug for TenantDecl {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantDecl")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A loaded node config and the model catalog it selects.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The config.
    pub(crate) config: NodeConfig,
    /// The presets the node accepts.
    pub(crate) catalog: Catalog,
}

/// Reads, parses and validates `path`.
pub(crate) fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let file = path.display().to_string();
    let err = |reason: String| ConfigError {
        file: file.clone(),
        key: String::new(),
        reason,
    };
    let len = std::fs::metadata(path)
        .map_err(|e| err(format!("cannot read: {e}")))?
        .len();
    if len > CONFIG_FILE_BYTES_MAX {
        return Err(err(format!(
            "expected at most {CONFIG_FILE_BYTES_MAX} bytes, found {len}"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    parse(&file, &base, &text)
}

/// Parses and validates config `text`; relative paths resolve against `base`.
pub(crate) fn parse(file: &str, base: &Path, text: &str) -> Result<Loaded, ConfigError> {
    let raw: raw::RawConfig = toml::from_str(text)
        .map_err(|e| kvfabric_store::geometry::preset::toml_error(file, text, &e))?;
    validate::Check { file, base }.config(raw)
}

#[cfg(test)]
mod tests;
