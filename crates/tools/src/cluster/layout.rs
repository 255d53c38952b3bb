//! The files of a local cluster: where each lives and what each node's config says.
//!
//! Ports: each node gets three (HTTP over TCP; the block transport, free for UDP and TCP since
//! it is QUIC's or UCX's; and the `raft` address, which carries Raft and control only when
//! blocks go over UCX), chosen by binding port 0 on loopback and releasing it, so that
//! concurrent clusters (tests) do not collide on fixed ports.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};

use anyhow::Context;
use kvfabric_test_support::config::{
    ClusterSection, DiskSection, EventsSection, MemberSection, NodeConfigFile, OperatorSection,
    TransportSection,
};

/// Each node's host tier unless `--host-bytes` says otherwise (the node validates the value).
pub const HOST_BYTES_DEFAULT: &str = "256 MiB";

/// One node of the local cluster.
#[derive(Debug, Clone)]
pub struct NodeLayout {
    /// Its id (1-based).
    pub id: u64,
    /// Its HTTP API.
    pub http: SocketAddr,
    /// Its block transport.
    pub transport: SocketAddr,
    /// Its Raft endpoint.
    pub raft: SocketAddr,
}

impl NodeLayout {
    /// `http://IP:PORT`.
    pub fn api(&self) -> String {
        format!("http://{}", self.http)
    }
}

/// The config file of node `id` in `dir`.
pub fn config_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node{id}.toml"))
}

/// The pid file of node `id` in `dir`.
pub fn pid_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node{id}.pid"))
}

/// The operator token of the cluster in `dir` (written by `up`, read by `add`, `remove` and
/// the tests).
pub fn operator_token_path(dir: &Path) -> PathBuf {
    dir.join("operator.token")
}

/// The cluster's operator token as `up` wrote it.
pub fn read_operator_token(dir: &Path) -> anyhow::Result<String> {
    let path = operator_token_path(dir);
    let t = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the operator token {}", path.display()))?;
    Ok(t.trim().to_owned())
}

/// A fresh operator token: 128 random bits from the OS, in hex.
pub fn new_operator_token() -> anyhow::Result<String> {
    use std::io::Read;
    let mut raw = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .context("reading /dev/urandom for the operator token")?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `token` to `dir`'s token file, readable by its owner only.
pub fn write_operator_token(dir: &Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = operator_token_path(dir);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(f, "{token}").with_context(|| format!("writing {}", path.display()))
}

/// Node `id`'s data directory in `dir`.
pub fn data_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node{id}"))
}

/// The log file of node `id` in `dir`.
pub fn log_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node{id}.log"))
}

fn free_tcp() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free TCP port")?;
    Ok(l.local_addr()?)
}

fn free_udp() -> anyhow::Result<SocketAddr> {
    let s = UdpSocket::bind("127.0.0.1:0").context("finding a free UDP port")?;
    Ok(s.local_addr()?)
}

/// A port free for both TCP and UDP (the block transport is UDP for QUIC, TCP for UCX).
fn free_tcp_and_udp() -> anyhow::Result<SocketAddr> {
    for _ in 0..50 {
        let tcp = TcpListener::bind("127.0.0.1:0").context("finding a free TCP port")?;
        let addr = tcp.local_addr()?;
        if UdpSocket::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    anyhow::bail!("no port free for both TCP and UDP on 127.0.0.1")
}

/// Picks ports for `nodes` nodes.
pub fn plan(nodes: u32) -> anyhow::Result<Vec<NodeLayout>> {
    (1..=u64::from(nodes)).map(plan_one).collect()
}

/// Extra keys of a node config's sections, as `cluster up` takes them (`KEY=VALUE`, each
/// value already checked to parse as TOML).
#[derive(Debug, Clone, Default)]
pub struct ExtraKeys {
    /// `[cluster]` keys (`--cluster-set`).
    pub cluster: Vec<(String, String)>,
    /// `[events]` keys (`--events-set`).
    pub events: Vec<(String, String)>,
    /// `[tiers.disk]` keys (`--disk-set`).
    pub disk: Vec<(String, String)>,
    /// `[transport] kind` (`--transport`), when not the default.
    pub transport: Option<String>,
    /// `[node] worker_threads` (`--worker-threads`), when not the default.
    pub worker_threads: Option<usize>,
}

/// Picks ports for node `id`.
pub fn plan_one(id: u64) -> anyhow::Result<NodeLayout> {
    Ok(NodeLayout {
        id,
        http: free_tcp()?,
        transport: free_tcp_and_udp()?,
        raft: free_udp()?,
    })
}

/// The config of `node` in a cluster of `all`, with data under `dir` and the operator's
/// `token`, and `extra_keys`.
pub fn config(
    dir: &Path,
    node: &NodeLayout,
    all: &[NodeLayout],
    replication: Option<u32>,
    host_bytes: &str,
    extra_keys: &ExtraKeys,
    token: &str,
) -> NodeConfigFile {
    let data_dir = data_path(dir, node.id);
    let mut c = NodeConfigFile::new(node.id, &node.http.to_string(), data_dir, host_bytes.into());
    c.node.log_level = Some("info".into());
    c.node.worker_threads = extra_keys.worker_threads;
    c.operator = Some(OperatorSection {
        token: token.to_owned(),
    });
    let values = |keys: &[(String, String)]| {
        keys.iter()
            .map(|(k, v)| (k.clone(), toml_value(v)))
            .collect()
    };
    c.tiers.disk = Some(DiskSection {
        extra: values(&extra_keys.disk),
        ..DiskSection::of("1 GiB")
    });
    c.transport = extra_keys.transport.as_ref().map(|kind| TransportSection {
        kind: Some(kind.clone()),
        ..TransportSection::default()
    });
    let extra = values(&extra_keys.cluster);
    if !extra_keys.events.is_empty() {
        c.events = Some(EventsSection {
            extra: values(&extra_keys.events),
            ..EventsSection::default()
        });
    }
    c.cluster = Some(ClusterSection {
        certs_dir: dir.join("certs"),
        transport_listen: None,
        raft_listen: None,
        replication,
        lease_ms: None,
        extra,
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
    c
}

/// Top-level sections `--tenancy` may hold (`[operator]` is written by `cluster up` itself).
const TENANCY_SECTIONS: [&str; 2] = ["namespaces", "tenants"];
/// Largest `--tenancy` file read, in bytes.
const TENANCY_FILE_BYTES_MAX: u64 = 1 << 20;

/// The text `--tenancy FILE` appends to every node's config: the file as written, checked to
/// be TOML holding only [`TENANCY_SECTIONS`] (the nodes validate the rest).
pub fn tenancy(file: &Path) -> anyhow::Result<String> {
    let len = std::fs::metadata(file)
        .with_context(|| format!("--tenancy {}", file.display()))?
        .len();
    if len > TENANCY_FILE_BYTES_MAX {
        anyhow::bail!(
            "--tenancy {}: expected at most {TENANCY_FILE_BYTES_MAX} bytes, found {len}",
            file.display()
        );
    }
    let text =
        std::fs::read_to_string(file).with_context(|| format!("--tenancy {}", file.display()))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        anyhow::anyhow!("--tenancy {}: {}", file.display(), e.message())
    })?;
    if let Some(k) = table
        .keys()
        .find(|k| !TENANCY_SECTIONS.contains(&k.as_str()))
    {
        anyhow::bail!(
            "--tenancy {}: expected only {} sections, found {k:?}",
            file.display(),
            TENANCY_SECTIONS.join(", ")
        );
    }
    Ok(format!("\n# From --tenancy {}\n{text}\n", file.display()))
}

/// A TOML value as `--cluster-set` gave it (checked by [`parse_cluster_set`]).
fn toml_value(v: &str) -> toml::Value {
    format!("v = {v}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(v.to_owned()))
}

/// Parses `--cluster-set KEY=VALUE`: a bare TOML key and a value that parses as TOML.
pub fn parse_cluster_set(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, found {s:?}"))?;
    let (k, v) = (k.trim(), v.trim());
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !bare {
        return Err(format!(
            "expected a bare key (letters, digits, _ or -), found {k:?}"
        ));
    }
    let doc = format!("{k} = {v}");
    doc.parse::<toml::Table>()
        .map_err(|e| format!("{k}: expected a TOML value, found {v:?} ({})", e.message()))?;
    Ok((k.to_owned(), v.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::{config, parse_cluster_set, plan, tenancy, ExtraKeys};
    use std::path::Path;

    #[test]
    fn worker_threads_reach_the_node_section_only_when_given() {
        let nodes = plan(2).unwrap();
        let write = |worker_threads| {
            let keys = ExtraKeys {
                worker_threads,
                ..ExtraKeys::default()
            };
            let c = config(
                Path::new("/c"),
                &nodes[0],
                &nodes,
                None,
                "1 GiB",
                &keys,
                "t",
            );
            let v: toml::Table = c.to_toml("test").parse().unwrap();
            v["node"].get("worker_threads").cloned()
        };
        assert_eq!(write(Some(1)), Some(toml::Value::Integer(1)));
        assert_eq!(write(None), None, "the node's own default");
    }

    #[test]
    fn cluster_set_takes_a_bare_key_and_a_toml_value() {
        assert_eq!(
            parse_cluster_set("lease_ms = 3000"),
            Ok(("lease_ms".into(), "3000".into()))
        );
        assert!(parse_cluster_set("lease_ms").is_err());
        assert!(parse_cluster_set("a.b=1").is_err());
        assert!(parse_cluster_set("x=not a value").is_err());
        assert!(parse_cluster_set("x=\"quoted\"").is_ok());
    }

    #[test]
    fn tenancy_takes_namespaces_and_tenants_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        let good = "[[namespaces]]\nname = \"a\"\n[[tenants]]\ntoken = \"t-0123456789abcdef\"\nnamespace = \"a\"\n";
        std::fs::write(&file, good).unwrap();
        assert!(tenancy(&file).unwrap().contains(good));
        for (text, says) in [
            ("[operator]\ntoken = \"x\"\n", "found \"operator\""),
            ("[[namespaces]\n", "--tenancy"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = tenancy(&file).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        assert!(tenancy(&dir.path().join("absent.toml")).is_err());
    }
}
