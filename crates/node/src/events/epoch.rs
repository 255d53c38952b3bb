//! The node's event epoch: a counter in `data_dir/events.epoch` that every start increments
//! and writes back (a temporary file renamed over the old one, synced), so that consumers of
//! the event stream can tell a restarted node from a live one even when its data survived.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// The file holding the last epoch, in `data_dir`.
pub(crate) const EPOCH_FILE: &str = "events.epoch";

/// Reads the last epoch from `data_dir` (0 when there is none), stores and returns the next.
pub(crate) fn next_epoch(data_dir: &Path) -> anyhow::Result<u64> {
    let path = data_dir.join(EPOCH_FILE);
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .with_context(|| format!("{} does not hold an epoch number", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let next = last
        .checked_add(1)
        .with_context(|| format!("{} is at the largest epoch", path.display()))?;
    let tmp = data_dir.join(format!("{EPOCH_FILE}.tmp"));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
    writeln!(f, "{next}").with_context(|| format!("writing {}", tmp.display()))?;
    f.sync_all()
        .with_context(|| format!("syncing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_start_gets_a_larger_epoch_and_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(next_epoch(dir.path()).unwrap(), 1);
        assert_eq!(next_epoch(dir.path()).unwrap(), 2);
        assert_eq!(next_epoch(dir.path()).unwrap(), 3);
        std::fs::write(dir.path().join(EPOCH_FILE), "not a number").unwrap();
        let e = next_epoch(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("does not hold an epoch"), "{e:#}");
    }
}
