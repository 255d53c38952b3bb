//! The node's event epoch: a counter in `data_dir/events.epoch` that every start increments
//! and writes back (a temporary file renamed over the old one, synced), so that consumers of
//! the event stream can tell a restarted node from a live one even when its data survived.

use std::io::Write;
use std::path::Path;

use crate::error::FabricError;

/// The file holding the last epoch, in `data_dir`.
pub const EPOCH_FILE: &str = "events.epoch";

fn epoch_error(path: &Path, reason: impl std::fmt::Display) -> FabricError {
    FabricError::EpochFile {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Reads the last epoch from `data_dir` (0 when there is none), stores and returns the next.
pub fn next_epoch(data_dir: &Path) -> Result<u64, FabricError> {
    let path = data_dir.join(EPOCH_FILE);
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| {
            epoch_error(
                &path,
                format!(
                    "expected an epoch number, found {:?}",
                    text.trim().chars().take(40).collect::<String>()
                ),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(epoch_error(&path, format!("reading: {e}"))),
    };
    let next = last
        .checked_add(1)
        .ok_or_else(|| epoch_error(&path, "expected an epoch below u64::MAX, found the largest"))?;
    let tmp = data_dir.join(format!("{EPOCH_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{next}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| epoch_error(&tmp, format!("writing the next epoch: {e}")))?;
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
        assert!(e.to_string().contains("expected an epoch number"), "{e}");
    }
}
