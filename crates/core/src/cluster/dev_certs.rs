//! Development certificates: with `generate_dev_certs = true`, the first member to start writes
//! a CA and every member's certificate into the certs directory, so the shipped local configs
//! start a cluster as they are. Several members may start at once: generation happens under an
//! exclusive `flock` on `certs_dir/.generate.lock`, and only when no `ca.pem` exists yet. Never
//! meant for a real deployment (every member's private key lands on every machine that runs it).

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::Path;

use kvfabric_transport::certs::generate_cluster;

/// Ensures `dir` holds a CA and certificates for `members` members; generates them if it holds
/// no CA. Returns whether this call generated them.
pub(crate) fn ensure(dir: &Path, members: u32) -> Result<bool, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let lock_path = dir.join(".generate.lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("open {}: {e}", lock_path.display()))?;
    // SAFETY: flock on a descriptor this function owns; released when `lock` is dropped.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("lock {}: {e}", lock_path.display()));
    }
    if dir.join("ca.pem").exists() {
        return Ok(false);
    }
    generate_cluster(dir, members).map_err(|e| e.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_starting_together_generate_once_and_share_one_ca() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("certs");
        let generated: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|_| s.spawn(|| ensure(&path, 3).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            generated.iter().filter(|g| **g).count(),
            1,
            "exactly one member generated"
        );
        for n in 1..=3 {
            assert!(path.join(format!("node{n}.pem")).is_file());
            assert!(path.join(format!("node{n}.key.pem")).is_file());
        }
        let ca = std::fs::read(path.join("ca.pem")).unwrap();
        assert!(!ensure(&path, 3).unwrap(), "an existing CA is kept");
        assert_eq!(std::fs::read(path.join("ca.pem")).unwrap(), ca);
    }
}
