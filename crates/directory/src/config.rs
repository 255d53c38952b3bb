//! The directory's configuration: shared defaults and a `validate()` that checks fields
//! against each other (openraft's `Config` pattern), plus the translation to openraft's own.

use serde::{Deserialize, Serialize};

use crate::codec::FRAME_HEADER_LEN;
use crate::error::DirectoryError;
use crate::merge::MERGE_REQUESTS_MAX;

/// Upper bound of one encoded ownership record (a chunk mapping is the largest: two 32-byte
/// ids; claims and releases are an id and a tier), with room for varint lengths.
const RECORD_BYTES_MAX: u64 = 72;
/// Upper bound of an entry's fixed part (log id, enum tags, node, epoch, vector lengths).
const ENTRY_OVERHEAD_BYTES: u64 = 256;
/// Upper bound of what one request adds to a merged entry besides its records (request id,
/// command tag, node, epoch, vector lengths).
const MERGED_REQUEST_BYTES: u64 = 64;
/// Upper bound of an append-entries request without its entries (vote, previous log id,
/// commit index), and of a snapshot chunk's metadata (membership with node addresses).
const RPC_OVERHEAD_BYTES: u64 = 64 * 1024;
/// No frame may exceed this, whatever the config says.
pub const FRAME_BYTES_HARD_MAX: u32 = 64 * 1024 * 1024;
/// No batch may exceed this many records, whatever the config says.
pub const BATCH_RECORDS_HARD_MAX: usize = 65_536;

/// No batcher may pipeline more entries than this, whatever the config says.
pub const BATCH_INFLIGHT_HARD_MAX: usize = 64;

/// Configuration of one directory member. Every bound the directory keeps is here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DirectoryConfig {
    /// Name of the Raft cluster (guards against joining the wrong one).
    pub cluster_name: String,
    /// Leader heartbeat period.
    pub heartbeat_interval_ms: u64,
    /// Lower bound of the randomized election timeout.
    pub election_timeout_min_ms: u64,
    /// Upper bound of the randomized election timeout.
    pub election_timeout_max_ms: u64,
    /// Whether a voter whose leader has been silent for the leader lease
    /// (`election_timeout_max_ms`) stands for election at once, once a majority of the voters
    /// grant it a pre-vote, rather than after openraft's own timer, which is then off (see
    /// `election` and `prevote`). Default true.
    pub prompt_election: bool,
    /// Most records (claims + releases + chunk mappings) coalesced into one Raft entry.
    pub batch_records_max: usize,
    /// Longest records gather into one batch while every pipeline slot is taken (a record
    /// that finds a slot free is proposed at once); the batch then takes the next free slot.
    pub batch_delay_ms_max: u64,
    /// Requests queued towards one batcher before callers wait (back-pressure).
    pub batch_queue_max: usize,
    /// Ownership entries one batcher may have proposed and not yet seen committed (the
    /// pipeline depth). Entries in flight together never touch the same record, so their
    /// commit order does not matter. Default 6: on three member processes sharing two cores,
    /// one record per request ran ~20% faster than at 4 and batched claims the same (README,
    /// "bench directory"); 2 was slower.
    pub batch_inflight_max: usize,
    /// Whether the leader sends its new entries to the voters while its own write is on disk,
    /// so that its sync and theirs overlap (see [`crate::preappend`]). Default true.
    pub preappend: bool,
    /// Length of a node lease.
    pub lease_ms: u64,
    /// How often the leader checks for expired leases.
    pub lease_check_interval_ms: u64,
    /// Build a snapshot after this many applied entries since the last one, at the latest.
    pub snapshot_logs_since_last: u64,
    /// Build a snapshot once the records applied since the last one reach the number of
    /// records in the state, and at least this many (so the log stays no longer than the
    /// state it rebuilds, and snapshot work per record stays constant as the state grows).
    pub snapshot_records_min: u64,
    /// Log entries kept behind a snapshot (so slightly lagging members need no snapshot).
    pub logs_kept_after_snapshot: u64,
    /// Most entries in one append-entries request.
    pub raft_payload_entries_max: u64,
    /// Largest snapshot chunk sent in one install-snapshot request.
    pub snapshot_chunk_bytes_max: u64,
    /// Largest RPC frame, in either direction.
    pub frame_bytes_max: u32,
    /// Bound on one Raft RPC (append entries, vote, snapshot chunk).
    pub rpc_timeout_ms: u64,
    /// Bound on a write, including forwarding to the leader and its retries.
    pub write_timeout_ms: u64,
    /// Bound on a linearizable read (read index and catching up to it).
    pub read_timeout_ms: u64,
    /// Most attempts of a forwarded write or read before giving up.
    pub forward_attempts_max: u32,
}

impl Default for DirectoryConfig {
    fn default() -> DirectoryConfig {
        DirectoryConfig {
            cluster_name: "kvfabric-directory".into(),
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1_000,
            prompt_election: true,
            batch_records_max: 512,
            batch_delay_ms_max: 5,
            batch_queue_max: 4_096,
            batch_inflight_max: 6,
            preappend: true,
            lease_ms: 10_000,
            lease_check_interval_ms: 500,
            snapshot_logs_since_last: 200_000,
            snapshot_records_min: 100_000,
            logs_kept_after_snapshot: 1_000,
            raft_payload_entries_max: 64,
            snapshot_chunk_bytes_max: 1024 * 1024,
            frame_bytes_max: 8 * 1024 * 1024,
            rpc_timeout_ms: 2_000,
            write_timeout_ms: 10_000,
            read_timeout_ms: 5_000,
            forward_attempts_max: 16,
        }
    }
}

fn bad(field: &'static str, expected: impl Into<String>, found: impl ToString) -> DirectoryError {
    DirectoryError::Config {
        field,
        expected: expected.into(),
        found: found.to_string(),
    }
}

impl DirectoryConfig {
    /// How long a leader leads, in touch with a quorum, before it expires leases: half a
    /// lease, so that every live node (renewing at least every half lease) has renewed after
    /// a gap in which nobody could (see the `lease` module).
    pub fn lease_grace_ms(&self) -> u64 {
        self.lease_ms / 2
    }

    /// Upper bound of one encoded log entry: a full batch, or a merged entry of several
    /// nodes' batches holding as many records in all (see [`crate::merge`]).
    pub fn entry_bytes_max(&self) -> u64 {
        ENTRY_OVERHEAD_BYTES
            + MERGED_REQUEST_BYTES * MERGE_REQUESTS_MAX as u64
            + RECORD_BYTES_MAX * self.batch_records_max as u64
    }

    /// Checks every field and the relations between them.
    pub fn validate(&self) -> Result<(), DirectoryError> {
        if self.cluster_name.is_empty() || self.cluster_name.len() > 128 {
            return Err(bad(
                "cluster_name",
                "1..=128 bytes",
                self.cluster_name.len(),
            ));
        }
        if self.heartbeat_interval_ms == 0 {
            return Err(bad("heartbeat_interval_ms", "> 0", 0));
        }
        // A follower must miss several heartbeats before it may start an election: openraft
        // 0.9 lets one wait out the leader's lease (`election_timeout_max_ms`) and then its
        // own timeout (at least `election_timeout_min_ms`), so the two together cover at least
        // five heartbeat periods with the minimum at two.
        if self.election_timeout_min_ms < 2 * self.heartbeat_interval_ms {
            return Err(bad(
                "election_timeout_min_ms",
                format!(
                    ">= 2 * heartbeat_interval_ms = {}",
                    2 * self.heartbeat_interval_ms
                ),
                self.election_timeout_min_ms,
            ));
        }
        if self.election_timeout_max_ms <= self.election_timeout_min_ms {
            return Err(bad(
                "election_timeout_max_ms",
                format!(
                    "> election_timeout_min_ms = {}",
                    self.election_timeout_min_ms
                ),
                self.election_timeout_max_ms,
            ));
        }
        // A claim that names its chunk is two records, and must fit one batch.
        if self.batch_records_max < 2 || self.batch_records_max > BATCH_RECORDS_HARD_MAX {
            return Err(bad(
                "batch_records_max",
                format!("2..={BATCH_RECORDS_HARD_MAX}"),
                self.batch_records_max,
            ));
        }
        if self.batch_queue_max == 0 {
            return Err(bad("batch_queue_max", "> 0", 0));
        }
        if !(1..=BATCH_INFLIGHT_HARD_MAX).contains(&self.batch_inflight_max) {
            return Err(bad(
                "batch_inflight_max",
                format!("1..={BATCH_INFLIGHT_HARD_MAX}"),
                self.batch_inflight_max,
            ));
        }
        // A lease shorter than an election would purge a healthy node's records whenever
        // the leader changes.
        if self.lease_ms <= 2 * self.election_timeout_max_ms {
            return Err(bad(
                "lease_ms",
                format!(
                    "> 2 * election_timeout_max_ms = {}",
                    2 * self.election_timeout_max_ms
                ),
                self.lease_ms,
            ));
        }
        if self.lease_check_interval_ms == 0 || self.lease_check_interval_ms >= self.lease_ms {
            return Err(bad(
                "lease_check_interval_ms",
                format!("1..lease_ms = {}", self.lease_ms),
                self.lease_check_interval_ms,
            ));
        }
        if self.batch_delay_ms_max >= self.lease_ms {
            return Err(bad(
                "batch_delay_ms_max",
                format!("< lease_ms = {}", self.lease_ms),
                self.batch_delay_ms_max,
            ));
        }
        if self.snapshot_logs_since_last == 0 {
            return Err(bad("snapshot_logs_since_last", "> 0", 0));
        }
        if self.snapshot_records_min == 0 {
            return Err(bad("snapshot_records_min", "> 0", 0));
        }
        if self.raft_payload_entries_max == 0 {
            return Err(bad("raft_payload_entries_max", "> 0", 0));
        }
        if self.frame_bytes_max > FRAME_BYTES_HARD_MAX {
            return Err(bad(
                "frame_bytes_max",
                format!("<= {FRAME_BYTES_HARD_MAX}"),
                self.frame_bytes_max,
            ));
        }
        let frame = u64::from(self.frame_bytes_max);
        let header = FRAME_HEADER_LEN as u64;
        // A full append-entries request must fit one frame, or replication would stall.
        let append =
            header + RPC_OVERHEAD_BYTES + self.raft_payload_entries_max * self.entry_bytes_max();
        if append > frame {
            return Err(bad(
                "frame_bytes_max",
                format!(
                    ">= {append} (raft_payload_entries_max {} x entry_bytes_max {} + overhead)",
                    self.raft_payload_entries_max,
                    self.entry_bytes_max()
                ),
                self.frame_bytes_max,
            ));
        }
        if self.snapshot_chunk_bytes_max == 0
            || header + RPC_OVERHEAD_BYTES + self.snapshot_chunk_bytes_max > frame
        {
            return Err(bad(
                "snapshot_chunk_bytes_max",
                format!("1..={}", frame.saturating_sub(header + RPC_OVERHEAD_BYTES)),
                self.snapshot_chunk_bytes_max,
            ));
        }
        for (field, v) in [
            ("rpc_timeout_ms", self.rpc_timeout_ms),
            ("write_timeout_ms", self.write_timeout_ms),
            ("read_timeout_ms", self.read_timeout_ms),
        ] {
            if v == 0 {
                return Err(bad(field, "> 0", 0));
            }
        }
        if self.rpc_timeout_ms <= self.heartbeat_interval_ms {
            return Err(bad(
                "rpc_timeout_ms",
                format!("> heartbeat_interval_ms = {}", self.heartbeat_interval_ms),
                self.rpc_timeout_ms,
            ));
        }
        if self.forward_attempts_max == 0 {
            return Err(bad("forward_attempts_max", "> 0", 0));
        }
        Ok(())
    }

    /// openraft's configuration for this directory config (validated by both).
    pub fn raft_config(&self) -> Result<openraft::Config, DirectoryError> {
        self.validate()?;
        let c = openraft::Config {
            cluster_name: self.cluster_name.clone(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: self.rpc_timeout_ms,
            max_payload_entries: self.raft_payload_entries_max,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs_since_last),
            snapshot_max_chunk_size: self.snapshot_chunk_bytes_max,
            max_in_snapshot_log_to_keep: self.logs_kept_after_snapshot,
            purge_batch_size: 64,
            // Prompt elections go through pre-votes; openraft's timer would stand without.
            enable_elect: !self.prompt_election,
            ..openraft::Config::default()
        };
        c.validate()
            .map_err(|e| bad("raft_config", "a config openraft accepts", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        DirectoryConfig::default().validate().unwrap();
        DirectoryConfig::default().raft_config().unwrap();
    }

    #[test]
    fn relations_are_checked() {
        let c = DirectoryConfig {
            election_timeout_max_ms: 400,
            ..DirectoryConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(DirectoryError::Config {
                field: "election_timeout_max_ms",
                ..
            })
        ));
        let c = DirectoryConfig {
            batch_records_max: 60_000,
            ..DirectoryConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(DirectoryError::Config {
                field: "frame_bytes_max",
                ..
            })
        ));
        let c = DirectoryConfig {
            lease_ms: 1_500,
            ..DirectoryConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(DirectoryError::Config {
                field: "lease_ms",
                ..
            })
        ));
        let c = DirectoryConfig {
            snapshot_chunk_bytes_max: 8 * 1024 * 1024,
            ..DirectoryConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(DirectoryError::Config {
                field: "snapshot_chunk_bytes_max",
                ..
            })
        ));
    }
}
