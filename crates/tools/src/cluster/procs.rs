//! The processes of a local cluster: pid files, whether a pid is still one of our nodes,
//! signals, bounded waits.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

/// How often a wait polls.
const POLL_MS: u64 = 100;

/// The pid in `path`, if the file exists.
pub fn read_pid(path: &Path) -> anyhow::Result<Option<i32>> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let pid = s.trim().parse::<i32>().with_context(|| {
                format!("{}: expected a pid, found {:?}", path.display(), s.trim())
            })?;
            Ok(Some(pid))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Whether `pid` is a live (not zombie) process whose command line names `config`: a pid file
/// left behind by a crash never makes us signal an unrelated process that reused the pid.
pub fn is_node(pid: i32, config: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let want = config.as_os_str().as_encoded_bytes();
    let names_config = cmdline.split(|b| *b == 0).any(|arg| arg == want);
    names_config && !is_zombie(pid)
}

fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the parenthesised command name, which may itself hold spaces.
    match stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
    {
        Some(state) => state == "Z" || state == "X",
        None => true,
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) with a positive pid has no memory effects in this process.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Waits up to `limit` for `pid` to stop being `config`'s node; `true` if it did.
pub fn wait_gone(pid: i32, config: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if !is_node(pid, config) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Stops `config`'s node `pid`: SIGTERM, up to `grace` for it to exit, then SIGKILL and up to
/// five more seconds. `Err` with the reason if it is still running.
pub fn stop(pid: i32, config: &Path, grace: Duration) -> anyhow::Result<()> {
    if !is_node(pid, config) {
        return Ok(());
    }
    if let Err(e) = signal(pid, libc::SIGTERM) {
        if e.raw_os_error() != Some(libc::ESRCH) {
            anyhow::bail!("SIGTERM to pid {pid}: {e}");
        }
    }
    if wait_gone(pid, config, grace) {
        return Ok(());
    }
    tracing::warn!(pid, "no exit after SIGTERM; sending SIGKILL");
    if let Err(e) = signal(pid, libc::SIGKILL) {
        if e.raw_os_error() != Some(libc::ESRCH) {
            anyhow::bail!("SIGKILL to pid {pid}: {e}");
        }
    }
    if wait_gone(pid, config, Duration::from_secs(5)) {
        return Ok(());
    }
    anyhow::bail!(
        "pid {pid} ({}) is still running after SIGKILL",
        config.display()
    )
}
