//! Every check of a node config a user can get wrong, fields against each other included,
//! each reported as a [`ConfigError`] naming the file, the dotted key and the reason.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kvfabric_core::local::scrub::{ScrubConfig, SCRUB_BYTES_PER_S_DEFAULT, SCRUB_PAUSE_MS_DEFAULT};
use kvfabric_store::tier::disk::{DiskConfig, SyncPolicy, SEGMENT_BYTES_DEFAULT};
use kvfabric_store::tier::host::REGION_BYTES_DEFAULT;
use kvfabric_store::{ByteCount, ConfigError, GpuConfig, GpuPolicy, StoreConfig, StoreError};

use super::raw::{RawConfig, RawLimits, RawNamespace, RawTenant};

use super::{Limits, Loaded, NamespaceDecl, NodeConfig, TenantDecl};
use kvfabric_core::presets::Catalog;
use kvfabric_core::NodeId;

/// Largest node id (ids are small positive integers, unique per cluster).
pub(crate) const NODE_ID_MAX: u64 = 1 << 32;
/// Longest namespace name.
pub(crate) const NAME_LEN_MAX: usize = 64;
/// Shortest and longest bearer token.
pub(crate) const TOKEN_LEN_MIN: usize = 16;
/// Longest bearer token.
pub(crate) const TOKEN_LEN_MAX: usize = 256;
/// Most namespaces or tenants one config may declare.
pub(crate) const TENANCY_ENTRIES_MAX: usize = 4096;
/// Shortest `tiers.disk.scrub_pause_ms`.
const SCRUB_PAUSE_MS_MIN: u64 = 100;
/// Largest accepted body: the disk tier's largest entry.
const BODY_BYTES_CAP: u64 = kvfabric_store::tier::disk::ENTRY_PAYLOAD_MAX_BYTES;
/// Most `node.worker_threads`.
const WORKER_THREADS_MAX: usize = 1024;
/// Longest accepted timeout (one hour).
const TIMEOUT_MS_MAX: u64 = 3_600_000;
/// Smallest disk segment the node derives.
const SEGMENT_BYTES_MIN: u64 = 1 << 20;

/// A validation pass over one file.
pub(crate) struct Check<'a> {
    pub(crate) file: &'a str,
    pub(crate) base: &'a Path,
}

impl Check<'_> {
    pub(super) fn err(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    pub(super) fn path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// Turns a parsed file into a validated config and its catalog.
    pub(crate) fn config(&self, raw: RawConfig) -> Result<Loaded, ConfigError> {
        if raw.node.id == 0 || raw.node.id > NODE_ID_MAX {
            return Err(self.err(
                "node.id",
                format!("expected 1 to {NODE_ID_MAX}, found {}", raw.node.id),
            ));
        }
        let node_id = NodeId(raw.node.id);
        let http_listen: SocketAddr = raw.node.http_listen.parse().map_err(|_| {
            self.err(
                "node.http_listen",
                format!(
                    "expected IP:PORT (e.g. 127.0.0.1:7101), found {:?}",
                    raw.node.http_listen
                ),
            )
        })?;
        if raw.node.data_dir.as_os_str().is_empty() {
            return Err(self.err("node.data_dir", "expected a directory, found an empty path"));
        }
        let data_dir = self.path(&raw.node.data_dir);
        let log_level = raw.node.log_level.unwrap_or_else(|| "info".to_owned());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_level) {
            return Err(self.err("node.log_level", format!("not a tracing filter: {e}")));
        }
        let worker_threads = match raw.node.worker_threads {
            None => default_worker_threads(),
            Some(n) if (1..=WORKER_THREADS_MAX).contains(&n) => n,
            Some(n) => {
                return Err(self.err(
                    "node.worker_threads",
                    format!("expected 1 to {WORKER_THREADS_MAX} threads, found {n}"),
                ))
            }
        };
        let catalog = self.catalog(raw.models.as_ref().map(|m| m.dir.as_path()))?;
        let Some(smallest) = catalog.smallest_block_bytes() else {
            return Err(self.err("models.dir", "no storable (mla or hybrid) preset in it"));
        };
        let largest = catalog.largest_block_bytes().unwrap_or(smallest);

        let host = raw.tiers.host_bytes.0;
        if host < smallest {
            return Err(self.err(
                "tiers.host_bytes",
                format!(
                    "expected at least the smallest storable block ({smallest} B with its header), found {host} B"
                ),
            ));
        }
        let (disk, scrub) = match raw.tiers.disk {
            None => (None, None),
            Some(d) => (
                Some(self.disk(&data_dir, d.bytes.0, d.sync.as_deref())?),
                self.scrub(d.scrub_bytes_per_s.map(|b| b.0), d.scrub_pause_ms)?,
            ),
        };
        let gpu = match raw.tiers.gpu {
            None => None,
            Some(g) if g.bytes.0 < smallest => {
                return Err(self.err(
                    "tiers.gpu.bytes",
                    format!(
                        "expected at least the smallest storable block ({smallest} B), found {} B",
                        g.bytes.0
                    ),
                ))
            }
            Some(g) => {
                let default = GpuPolicy::default();
                Some(GpuConfig {
                    ordinal: g.ordinal as usize,
                    capacity: ByteCount(g.bytes.0),
                    policy: GpuPolicy {
                        puts: g.puts.unwrap_or(default.puts),
                        promote: g.promote.unwrap_or(default.promote),
                    },
                })
            }
        };
        let limits = self.limits(&raw.limits, smallest, largest)?;
        let (namespaces, tenants) = self.tenancy(raw.namespaces, raw.tenants)?;
        let route = super::route::check(self, &raw.route)?;
        let transport = super::transport::check(self, &raw.transport)?;
        let arenas = super::arenas::check(self, &raw.arenas, &catalog)?;
        let cluster = match raw.cluster {
            None => None,
            Some(c) => Some(self.cluster(node_id, c, transport)?),
        };
        let events = self.events(node_id, raw.events)?;
        let namespace_secret = super::secret::check(
            self,
            raw.node.namespace_secret.as_deref(),
            &data_dir,
            cluster.as_ref(),
        )?;
        let operator = super::operator::check(self, raw.operator, &tenants)?;
        let config = NodeConfig {
            file: self.file.to_owned(),
            node_id,
            http_listen,
            data_dir,
            log_level,
            worker_threads,
            store: StoreConfig {
                gpu,
                host_capacity: ByteCount(host),
                host_region_bytes: REGION_BYTES_DEFAULT,
                disk,
            },
            scrub,
            limits,
            namespaces,
            tenants,
            cluster,
            events,
            route,
            operator,
            arenas,
            namespace_secret,
        };
        Ok(Loaded { config, catalog })
    }

    /// `a-z 0-9 . - _`, 1 to [`NAME_LEN_MAX`] characters.
    fn name(&self, key: &str, s: &str) -> Result<String, ConfigError> {
        let ok = |c: char| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' || c == '.'
        };
        if s.is_empty() || s.len() > NAME_LEN_MAX || !s.chars().all(ok) {
            return Err(self.err(
                key,
                format!(
                    "expected 1 to {NAME_LEN_MAX} characters of a-z 0-9 . - _, found {:?}",
                    s.chars().take(80).collect::<String>()
                ),
            ));
        }
        Ok(s.to_owned())
    }

    fn catalog(&self, dir: Option<&Path>) -> Result<Catalog, ConfigError> {
        let Some(dir) = dir else {
            return Ok(Catalog::builtin());
        };
        let dir = self.path(dir);
        if !dir.is_dir() {
            return Err(self.err(
                "models.dir",
                format!(
                    "expected a directory of presets, found none at {}",
                    dir.display()
                ),
            ));
        }
        Catalog::from_dir(&dir).map_err(|e| match e {
            // A bad preset names its own file and key.
            StoreError::Config(c) => c,
            other => self.err("models.dir", other.to_string()),
        })
    }

    fn disk(
        &self,
        data_dir: &Path,
        bytes: u64,
        sync: Option<&str>,
    ) -> Result<DiskConfig, ConfigError> {
        let sync = match sync {
            None | Some("deferred") => SyncPolicy::Deferred,
            Some("every_append") => SyncPolicy::EveryAppend,
            Some(other) => {
                return Err(self.err(
                    "tiers.disk.sync",
                    format!("expected deferred or every_append, found {other:?}"),
                ))
            }
        };
        let mut d = DiskConfig::new(data_dir.join("disk"), ByteCount(bytes));
        d.sync = sync;
        // Soft segment size: an eighth of the tier, within [1 MiB, the store's default].
        d.segment_bytes = (bytes / 8).clamp(SEGMENT_BYTES_MIN, SEGMENT_BYTES_DEFAULT);
        d.validate().map_err(|e| {
            let key = match e.key.as_str() {
                "disk.capacity" => "tiers.disk.bytes".to_owned(),
                "disk.dir" => "node.data_dir".to_owned(),
                other => format!("tiers.{other}"),
            };
            self.err(&key, e.reason)
        })?;
        Ok(d)
    }

    /// `[tiers.disk]`'s scrub keys: `None` when the rate is 0 (off).
    fn scrub(
        &self,
        bytes_per_s: Option<u64>,
        pause_ms: Option<u64>,
    ) -> Result<Option<ScrubConfig>, ConfigError> {
        let pause_ms = pause_ms.unwrap_or(SCRUB_PAUSE_MS_DEFAULT);
        if pause_ms < SCRUB_PAUSE_MS_MIN {
            return Err(self.err(
                "tiers.disk.scrub_pause_ms",
                format!("expected at least {SCRUB_PAUSE_MS_MIN}, found {pause_ms}"),
            ));
        }
        Ok(match bytes_per_s.unwrap_or(SCRUB_BYTES_PER_S_DEFAULT) {
            0 => None,
            bytes_per_s => Some(ScrubConfig {
                bytes_per_s,
                pause: std::time::Duration::from_millis(pause_ms),
            }),
        })
    }

    fn limits(&self, raw: &RawLimits, smallest: u64, largest: u64) -> Result<Limits, ConfigError> {
        let max_body_bytes = raw.max_body_bytes.map(|b| b.0).unwrap_or(largest);
        if max_body_bytes < smallest || max_body_bytes > BODY_BYTES_CAP {
            return Err(self.err(
                "limits.max_body_bytes",
                format!(
                    "expected {smallest} B (the smallest storable block) to {BODY_BYTES_CAP} B, found {max_body_bytes} B"
                ),
            ));
        }
        let count = |key: &str, v: Option<u32>, default: u32, max: u32| match v.unwrap_or(default) {
            n if (1..=max).contains(&n) => Ok(n),
            n => Err(self.err(key, format!("expected 1 to {max}, found {n}"))),
        };
        let max_connections = count("limits.max_connections", raw.max_connections, 256, 65_536)?;
        let max_inflight_requests = count(
            "limits.max_inflight_requests",
            raw.max_inflight_requests,
            64.min(max_connections),
            max_connections,
        )?;
        let max_lookup_keys = count("limits.max_lookup_keys", raw.max_lookup_keys, 1024, 65_536)?;
        let ms = |key: &str, v: Option<u64>, default: u64| match v.unwrap_or(default) {
            n if (1..=TIMEOUT_MS_MAX).contains(&n) => Ok(Duration::from_millis(n)),
            n => Err(self.err(key, format!("expected 1 to {TIMEOUT_MS_MAX} ms, found {n}"))),
        };
        Ok(Limits {
            max_body_bytes,
            max_connections,
            max_inflight_requests,
            max_lookup_keys,
            header_read_timeout: ms(
                "limits.header_read_timeout_ms",
                raw.header_read_timeout_ms,
                10_000,
            )?,
            body_read_timeout: ms(
                "limits.body_read_timeout_ms",
                raw.body_read_timeout_ms,
                60_000,
            )?,
        })
    }

    fn tenancy(
        &self,
        namespaces: Vec<RawNamespace>,
        tenants: Vec<RawTenant>,
    ) -> Result<(Vec<NamespaceDecl>, Vec<TenantDecl>), ConfigError> {
        if namespaces.len() > TENANCY_ENTRIES_MAX || tenants.len() > TENANCY_ENTRIES_MAX {
            return Err(self.err(
                "tenants",
                format!("expected at most {TENANCY_ENTRIES_MAX} namespaces and tenants each"),
            ));
        }
        if tenants.is_empty() && !namespaces.is_empty() {
            return Err(self.err(
                "tenants",
                "namespaces are declared but no tenant: declare [[tenants]] or drop [[namespaces]] for one open namespace",
            ));
        }
        let mut decls: Vec<NamespaceDecl> = Vec::with_capacity(namespaces.len());
        for (i, n) in namespaces.into_iter().enumerate() {
            let key = format!("namespaces[{i}].name");
            let name = self.name(&key, &n.name)?;
            if decls.iter().any(|d| d.name == name) {
                return Err(self.err(&key, format!("namespace `{name}` is declared twice")));
            }
            decls.push(NamespaceDecl {
                name,
                shared: n.shared,
            });
        }
        let mut out: Vec<TenantDecl> = Vec::with_capacity(tenants.len());
        let mut tokens = HashSet::new();
        for (i, t) in tenants.into_iter().enumerate() {
            let visible = t.token.chars().all(|c| c.is_ascii_graphic());
            if !(TOKEN_LEN_MIN..=TOKEN_LEN_MAX).contains(&t.token.len()) || !visible {
                return Err(self.err(
                    &format!("tenants[{i}].token"),
                    format!(
                        "expected {TOKEN_LEN_MIN} to {TOKEN_LEN_MAX} visible ASCII characters, found {} characters",
                        t.token.chars().count()
                    ),
                ));
            }
            if !tokens.insert(t.token.clone()) {
                return Err(self.err(
                    &format!("tenants[{i}].token"),
                    "the same token is given to two tenants",
                ));
            }
            let Some(ns) = decls.iter().position(|d| d.name == t.namespace) else {
                return Err(self.err(
                    &format!("tenants[{i}].namespace"),
                    format!(
                        "namespace {:?} is not declared in [[namespaces]]",
                        t.namespace.chars().take(80).collect::<String>()
                    ),
                ));
            };
            out.push(TenantDecl {
                token: t.token,
                namespace: ns,
            });
        }
        for (i, d) in decls.iter().enumerate() {
            if !d.shared && !out.iter().any(|t| t.namespace == i) {
                return Err(self.err(
                    &format!("namespaces[{i}].name"),
                    format!("namespace `{}` is neither shared nor given to a tenant: nothing could use it", d.name),
                ));
            }
        }
        Ok((decls, out))
    }
}

/// The async runtime's worker threads when `node.worker_threads` is absent: one per core this
/// process may use (its affinity mask and cgroup quota count), at least 2.
fn default_worker_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}
