//! [`DiskConfig`] and [`SyncPolicy`]: where the tier lives, how big it may grow, when it syncs.

use std::path::PathBuf;

use crate::error::ConfigError;
use crate::tier::disk::entry::ENTRY_HEADER_LEN;
use crate::tier::disk::segment::SEGMENT_HEADER_LEN;
use crate::units::ByteCount;

/// Default segment size: 256 MiB (56 DeepSeek-V3 bf16 blocks of 4.5 MiB).
pub const SEGMENT_BYTES_DEFAULT: u64 = 256 << 20;
/// Default garbage ratio above which [`compact`](super::DiskTier::compact) rewrites a segment.
pub const COMPACT_GARBAGE_RATIO_DEFAULT: f64 = 0.5;

/// When appends reach stable storage.
///
/// Either way a process crash (kill -9) loses nothing acknowledged: written bytes sit in the
/// kernel's page cache, which outlives the process. The policies differ on power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// `fdatasync` after every append (block or tombstone), and the directory after a new
    /// segment: an acknowledged write survives power loss. Costs a device flush per write.
    EveryAppend,
    /// The default: the kernel writes back when it chooses ([`DiskTier::sync`](super::DiskTier::sync)
    /// forces it). On power loss the entries since the last writeback may be missing or torn;
    /// recovery truncates a torn tail and quarantines bytes that do not match their id, so
    /// nothing wrong is ever served, and a freed block may come back (still verified). The
    /// default because the KV cache is recomputable and replicated across nodes: losing the
    /// last seconds of a node's disk tier costs recompute, never correctness. Compaction syncs
    /// regardless of this policy (it deletes the only other copy).
    #[default]
    Deferred,
}

/// How a disk tier is laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskConfig {
    /// Directory holding the segment files (created if missing; owned by one tier at a time).
    pub dir: PathBuf,
    /// Upper bound on the bytes of all segment files together (live, garbage, tombstones).
    pub capacity: ByteCount,
    /// A segment is sealed once the next block would take it past this size (soft: a block
    /// larger than this gets a segment of its own, and tombstones may overshoot it).
    pub segment_bytes: u64,
    /// When appends are synced.
    pub sync: SyncPolicy,
    /// Segments whose garbage share of their bytes is at least this are compacted (0 < r ≤ 1).
    pub compact_garbage_ratio: f64,
    /// Hash every written block and refuse one whose bytes do not match its id. Reads are
    /// verified regardless; this only catches a caller's bug before it reaches the disk.
    pub verify_writes: bool,
}

impl DiskConfig {
    /// A tier in `dir` of `capacity` bytes with default segment size, sync policy and
    /// compaction threshold.
    pub fn new(dir: impl Into<PathBuf>, capacity: ByteCount) -> DiskConfig {
        DiskConfig {
            dir: dir.into(),
            capacity,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            sync: SyncPolicy::default(),
            compact_garbage_ratio: COMPACT_GARBAGE_RATIO_DEFAULT,
            verify_writes: true,
        }
    }

    /// Smallest capacity that holds one non-empty block: a segment header, the entry, and the
    /// room reserved for its tombstone.
    pub const fn capacity_min() -> u64 {
        SEGMENT_HEADER_LEN + 2 * ENTRY_HEADER_LEN + 1
    }

    /// Checks the fields against each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key: &str, reason: String| ConfigError {
            file: format!("<disk tier {}>", self.dir.display()),
            key: key.to_string(),
            reason,
        };
        if self.dir.as_os_str().is_empty() {
            return Err(err(
                "disk.dir",
                "expected a directory, found an empty path".into(),
            ));
        }
        if self.capacity.0 < Self::capacity_min() {
            return Err(err(
                "disk.capacity",
                format!(
                    "expected at least {} B, found {}",
                    Self::capacity_min(),
                    self.capacity
                ),
            ));
        }
        let seg_min = SEGMENT_HEADER_LEN + ENTRY_HEADER_LEN;
        if self.segment_bytes < seg_min {
            return Err(err(
                "disk.segment_bytes",
                format!(
                    "expected at least {seg_min} B, found {} B",
                    self.segment_bytes
                ),
            ));
        }
        let r = self.compact_garbage_ratio;
        if !(r > 0.0 && r <= 1.0) {
            return Err(err(
                "disk.compact_garbage_ratio",
                format!("expected a ratio in (0, 1], found {r}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_config_validate_names_the_key() {
        let ok = DiskConfig::new("/tmp/x", ByteCount(1 << 20));
        assert_eq!(ok.validate(), Ok(()));
        let small = DiskConfig {
            capacity: ByteCount(10),
            ..ok.clone()
        };
        assert_eq!(
            small.validate().map_err(|e| e.key),
            Err("disk.capacity".to_string())
        );
        let ratio = DiskConfig {
            compact_garbage_ratio: 0.0,
            ..ok.clone()
        };
        assert!(ratio.validate().is_err());
        let seg = DiskConfig {
            segment_bytes: 8,
            ..ok
        };
        assert_eq!(
            seg.validate().map_err(|e| e.key),
            Err("disk.segment_bytes".to_string())
        );
    }
}
