//! Bugs planted on purpose for the chaos harness's checker to catch (feature `planted-bugs`,
//! never in normal builds). At run time `KVFABRIC_PLANTED` (a comma-separated list) selects
//! which are active in this process:
//!
//! - `skip-verify`: a receiver accepts a block's bytes without checking them against its id.
//! - `lying-peer`: this node serves every block with one byte flipped (a faulty or malicious
//!   owner; receivers must reject it and fetch from another owner).
//! - `diverging-replica`: this node's directory replica records, after each entry it applies,
//!   a reply no other member has (kvfabric-core; the chaos digest comparison must see it).

use std::sync::OnceLock;

/// The environment variable naming the active planted bugs.
pub const PLANTED_ENV: &str = "KVFABRIC_PLANTED";

/// Whether the planted bug `name` is active in this process (read once).
pub fn active(name: &str) -> bool {
    static ACTIVE: OnceLock<Vec<String>> = OnceLock::new();
    ACTIVE
        .get_or_init(|| {
            std::env::var(PLANTED_ENV)
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .iter()
        .any(|a| a == name)
}

/// The bytes a lying peer serves: `bytes` with one byte in the middle flipped.
pub fn lie(bytes: &bytes::Bytes) -> bytes::Bytes {
    let mut v = bytes.to_vec();
    if let Some(b) = v.get_mut(bytes.len() / 2) {
        *b ^= 0x5a;
    }
    bytes::Bytes::from(v)
}
