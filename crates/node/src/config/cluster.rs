//! `[cluster]`: the members of a cluster, this node's listeners on the node-to-node networks,
//! its TLS identity, the replication factor and the directory's lease and batching bounds.
//!
//! ```toml
//! [cluster]                         # optional: a standalone node without it
//! certs_dir = "/tmp/kvfabric/certs" # from `kvfabric certs --out DIR --nodes N`: ca.pem,
//!                                   # nodeN.pem, nodeN.key.pem (checked at start)
//! generate_dev_certs = false        # optional; DEVELOPMENT ONLY: when certs_dir holds no CA,
//!                                   # the first member to start writes a CA and every
//!                                   # member's certificate there (under a lock)
//! cert_name = "node1"               # optional, default "node{id}"; peers are dialled by
//!                                   # this name, which must be "node{id}"
//! transport_listen = "127.0.0.1:7201" # optional, default: this member's `transport`
//! raft_listen = "127.0.0.1:7301"    # optional, default: this member's `raft`
//! replication = 2                   # optional: copies a put waits for; default 2 with two
//!                                   # or more members, 1 alone; at most the member count
//! lease_ms = 10000                  # optional: a node's ownership lease in the directory
//! lease_renew_ms = 2500             # optional, default lease_ms / 4; below lease_ms / 2
//! repair_interval_ms = 5000         # optional: re-replication pass period; 0 turns it off
//! repair_blocks_max = 256           # optional: most blocks one pass re-replicates
//! batch_records_max = 512           # optional: ownership records per Raft entry
//! batch_delay_ms_max = 5            # optional: longest records gather while the pipeline is full
//! batch_inflight_max = 6            # optional: ownership entries pipelined per node
//! preappend = true                  # optional: the leader sends new entries to the voters
//!                                   # while its own write is on disk (syncs overlap)
//! heartbeat_interval_ms = 100       # optional, Raft
//! election_timeout_min_ms = 200     # optional, Raft
//! election_timeout_max_ms = 350     # optional, Raft
//! rpc_timeout_ms = 1000             # optional, Raft: one RPC
//! attempt_ms = 2000                 # optional: bound on one push, fetch or probe of one
//!                                   # peer (at most transport.fetch_timeout_ms)
//! suspect_ms = 400                  # optional: a peer silent this long in an attempt is
//!                                   # suspected (left out of placement, tried last, probed)
//! hedge_ms = 150                    # optional: a silent owner gets company in a read (the
//!                                   # next starts beside it) after this long; a push, once
//!                                   # its peer is suspected
//! probe_ms = 250                    # optional: first probe of a suspect; then doubling
//! probe_ms_max = 2000               # optional: longest wait between probes
//!
//! [[cluster.members]]               # every member, this node included; ids unique
//! id = 1
//! api = "http://127.0.0.1:7101"     # its HTTP API as clients reach it
//! transport = "127.0.0.1:7201"      # its QUIC block transport (IP:PORT)
//! raft = "127.0.0.1:7301"           # its Raft endpoint (IP:PORT)
//! ```

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use kvfabric_directory::DirectoryConfig;
use kvfabric_store::ConfigError;

use super::raw::{RawCluster, RawMember};
use super::validate::{Check, NODE_ID_MAX};
use kvfabric_core::config::{ClusterConfig, FailoverConfig, Member};
use kvfabric_core::NodeId;

/// Most members one cluster config may list.
pub(crate) const MEMBERS_MAX: usize = 64;
/// Highest replication factor.
pub(crate) const REPLICATION_MAX: u32 = 8;

/// Raft's timing on a node: heartbeats every 100 ms (also openraft's bound on one
/// AppendEntries), election timeouts of 200–350 ms, an RPC bounded by 1 s. openraft 0.9 lets
/// a follower that stops hearing its leader wait out the leader's lease (the maximum, 350 ms)
/// and then its own timeout (drawn in 200–350 ms at start), checked on a 150 ms tick:
/// 0.55–0.85 s before it asks for votes, then a round trip and one commit. Two followers that
/// ask on the same tick split the vote, and the winner asks again after its timeout (0.2–0.5
/// s more); a member whose log is shorter than one it has seen waits 0.7 s longer, so the
/// most up-to-date survivor wins. A write forwarded to the dead leader is abandoned as soon
/// as the leadership moves (see `docs/API.md`, "Failover").
pub(crate) fn raft_defaults() -> DirectoryConfig {
    DirectoryConfig {
        heartbeat_interval_ms: 100,
        election_timeout_min_ms: 200,
        election_timeout_max_ms: 350,
        rpc_timeout_ms: 1_000,
        ..DirectoryConfig::default()
    }
}

/// Default period of the re-replication pass.
const REPAIR_INTERVAL_MS_DEFAULT: u64 = 5_000;
/// Shortest re-replication period allowed (each pass reads every held block's owners).
const REPAIR_INTERVAL_MS_MIN: u64 = 100;
/// Default bound on the blocks one pass re-replicates.
const REPAIR_BLOCKS_MAX_DEFAULT: usize = 256;
/// Largest `repair_blocks_max` allowed.
const REPAIR_BLOCKS_MAX_LIMIT: usize = 65_536;

impl Check<'_> {
    fn socket(&self, key: &str, s: &str) -> Result<SocketAddr, ConfigError> {
        s.parse().map_err(|_| {
            self.err(
                key,
                format!("expected IP:PORT (e.g. 127.0.0.1:7201), found {s:?}"),
            )
        })
    }

    fn member(&self, i: usize, m: &RawMember) -> Result<Member, ConfigError> {
        let key = |k: &str| format!("cluster.members[{i}].{k}");
        if m.id == 0 || m.id > NODE_ID_MAX {
            return Err(self.err(
                &key("id"),
                format!("expected 1 to {NODE_ID_MAX}, found {}", m.id),
            ));
        }
        let api_addr = m.api.strip_prefix("http://").unwrap_or("");
        if api_addr.parse::<SocketAddr>().is_err() {
            return Err(self.err(
                &key("api"),
                format!("expected http://IP:PORT, found {:?}", m.api),
            ));
        }
        Ok(Member {
            id: NodeId(m.id),
            api: m.api.clone(),
            transport: self.socket(&key("transport"), &m.transport)?,
            raft: self.socket(&key("raft"), &m.raft)?,
        })
    }

    /// Validates `[cluster]` for node `me`.
    pub(crate) fn cluster(
        &self,
        me: NodeId,
        raw: RawCluster,
        transport: kvfabric_core::config::TransportSettings,
    ) -> Result<ClusterConfig, ConfigError> {
        if raw.members.is_empty() || raw.members.len() > MEMBERS_MAX {
            return Err(self.err(
                "cluster.members",
                format!(
                    "expected 1 to {MEMBERS_MAX} members, found {}",
                    raw.members.len()
                ),
            ));
        }
        let mut members = Vec::with_capacity(raw.members.len());
        let mut seen = HashSet::new();
        for (i, m) in raw.members.iter().enumerate() {
            let m = self.member(i, m)?;
            if !seen.insert(m.id) {
                return Err(self.err(
                    &format!("cluster.members[{i}].id"),
                    format!("expected unique ids, found {} twice", m.id),
                ));
            }
            members.push(m);
        }
        members.sort_by_key(|m| m.id);
        let Some(mine) = members.iter().find(|m| m.id == me).cloned() else {
            return Err(self.err(
                "cluster.members",
                format!("expected this node ({me}) among the members, found it missing"),
            ));
        };
        let transport_listen = match &raw.transport_listen {
            Some(s) => self.socket("cluster.transport_listen", s)?,
            None => mine.transport,
        };
        let raft_listen = match &raw.raft_listen {
            Some(s) => self.socket("cluster.raft_listen", s)?,
            None => mine.raft,
        };
        for (key, listen, advertised) in [
            ("cluster.transport_listen", transport_listen, mine.transport),
            ("cluster.raft_listen", raft_listen, mine.raft),
        ] {
            if listen.port() != advertised.port() {
                return Err(self.err(
                    key,
                    format!(
                        "expected the port this node's member entry advertises ({}), found {}",
                        advertised.port(),
                        listen.port()
                    ),
                ));
            }
        }
        let cert_name = raw.cert_name.clone().unwrap_or_else(|| mine.cert_name());
        if cert_name != mine.cert_name() {
            return Err(self.err(
                "cluster.cert_name",
                format!(
                    "expected {:?} (peers dial node{{id}}), found {cert_name:?}",
                    mine.cert_name()
                ),
            ));
        }
        let certs_dir = self.path(&raw.certs_dir);
        let generate_dev_certs = raw.generate_dev_certs.unwrap_or(false);
        // With development certificates the files may not exist yet: the first member to start
        // writes them under a lock (see `cluster::dev_certs`), and loading them names any gap.
        let to_generate = generate_dev_certs;
        for file in [
            "ca.pem".to_owned(),
            format!("{cert_name}.pem"),
            format!("{cert_name}.key.pem"),
        ] {
            let path = certs_dir.join(&file);
            if !to_generate && !path.is_file() {
                return Err(self.err(
                    "cluster.certs_dir",
                    format!(
                        "expected {} to exist (generate with `kvfabric certs --out {} --nodes {}`), found it missing",
                        path.display(),
                        certs_dir.display(),
                        members.len()
                    ),
                ));
            }
        }
        let default_r = if members.len() >= 2 { 2 } else { 1 };
        let replication = raw.replication.unwrap_or(default_r);
        if replication == 0 || replication > REPLICATION_MAX || replication as usize > members.len()
        {
            return Err(self.err(
                "cluster.replication",
                format!(
                    "expected 1 to {} (at most the member count and {REPLICATION_MAX}), found {replication}",
                    members.len().min(REPLICATION_MAX as usize)
                ),
            ));
        }
        let defaults = raft_defaults();
        let directory = DirectoryConfig {
            cluster_name: "kvfabric".to_owned(),
            lease_ms: raw.lease_ms.unwrap_or(defaults.lease_ms),
            batch_records_max: raw.batch_records_max.unwrap_or(defaults.batch_records_max),
            batch_delay_ms_max: raw
                .batch_delay_ms_max
                .unwrap_or(defaults.batch_delay_ms_max),
            batch_inflight_max: raw
                .batch_inflight_max
                .unwrap_or(defaults.batch_inflight_max),
            preappend: raw.preappend.unwrap_or(defaults.preappend),
            heartbeat_interval_ms: raw
                .heartbeat_interval_ms
                .unwrap_or(defaults.heartbeat_interval_ms),
            election_timeout_min_ms: raw
                .election_timeout_min_ms
                .unwrap_or(defaults.election_timeout_min_ms),
            election_timeout_max_ms: raw
                .election_timeout_max_ms
                .unwrap_or(defaults.election_timeout_max_ms),
            rpc_timeout_ms: raw.rpc_timeout_ms.unwrap_or(defaults.rpc_timeout_ms),
            ..defaults
        };
        if let Err(e) = directory.validate() {
            let key = match &e {
                kvfabric_directory::DirectoryError::Config { field, .. } => {
                    format!("cluster.{field}")
                }
                _ => "cluster".to_owned(),
            };
            return Err(self.err(&key, e.to_string()));
        }
        let renew_ms = raw.lease_renew_ms.unwrap_or(directory.lease_ms / 4);
        if renew_ms == 0 || renew_ms * 2 > directory.lease_ms {
            return Err(self.err(
                "cluster.lease_renew_ms",
                format!(
                    "expected 1 to lease_ms / 2 ({}), found {renew_ms}",
                    directory.lease_ms / 2
                ),
            ));
        }
        let repair_ms = raw.repair_interval_ms.unwrap_or(REPAIR_INTERVAL_MS_DEFAULT);
        if repair_ms != 0 && repair_ms < REPAIR_INTERVAL_MS_MIN {
            return Err(self.err(
                "cluster.repair_interval_ms",
                format!("expected 0 (off) or at least {REPAIR_INTERVAL_MS_MIN}, found {repair_ms}"),
            ));
        }
        let repair_blocks_max = raw.repair_blocks_max.unwrap_or(REPAIR_BLOCKS_MAX_DEFAULT);
        if !(1..=REPAIR_BLOCKS_MAX_LIMIT).contains(&repair_blocks_max) {
            return Err(self.err(
                "cluster.repair_blocks_max",
                format!("expected 1 to {REPAIR_BLOCKS_MAX_LIMIT}, found {repair_blocks_max}"),
            ));
        }
        let failover = self.failover(&raw, &transport)?;
        Ok(ClusterConfig {
            transport_listen,
            raft_listen,
            certs_dir,
            generate_dev_certs,
            cert_name,
            replication,
            lease_renew: Duration::from_millis(renew_ms),
            repair_interval: (repair_ms != 0).then(|| Duration::from_millis(repair_ms)),
            repair_blocks_max,
            members,
            directory,
            transport,
            failover,
        })
    }

    /// The failover bounds of `[cluster]`, checked against each other and the transport's.
    fn failover(
        &self,
        raw: &RawCluster,
        transport: &kvfabric_core::config::TransportSettings,
    ) -> Result<FailoverConfig, ConfigError> {
        let d = FailoverConfig::default();
        let f = FailoverConfig {
            attempt_ms: raw.attempt_ms.unwrap_or(d.attempt_ms),
            hedge_ms: raw.hedge_ms.unwrap_or(d.hedge_ms),
            suspect_ms: raw.suspect_ms.unwrap_or(d.suspect_ms),
            probe_ms: raw.probe_ms.unwrap_or(d.probe_ms),
            probe_ms_max: raw.probe_ms_max.unwrap_or(d.probe_ms_max),
        };
        let fetch = transport.config.fetch_timeout_ms;
        if !(1..=fetch).contains(&f.attempt_ms) {
            return Err(self.err(
                "cluster.attempt_ms",
                format!(
                    "expected 1 to transport.fetch_timeout_ms ({fetch}), found {}",
                    f.attempt_ms
                ),
            ));
        }
        if f.hedge_ms == 0 || f.hedge_ms >= f.attempt_ms {
            return Err(self.err(
                "cluster.hedge_ms",
                format!(
                    "expected 1 to below attempt_ms ({}), found {}",
                    f.attempt_ms, f.hedge_ms
                ),
            ));
        }
        if f.suspect_ms == 0 || f.suspect_ms >= f.attempt_ms {
            return Err(self.err(
                "cluster.suspect_ms",
                format!(
                    "expected 1 to below attempt_ms ({}), found {}",
                    f.attempt_ms, f.suspect_ms
                ),
            ));
        }
        if f.probe_ms == 0 || f.probe_ms > f.probe_ms_max || f.probe_ms_max > 600_000 {
            return Err(self.err(
                "cluster.probe_ms",
                format!(
                    "expected 1 <= probe_ms ({}) <= probe_ms_max ({}) <= 600000",
                    f.probe_ms, f.probe_ms_max
                ),
            ));
        }
        Ok(f)
    }
}
