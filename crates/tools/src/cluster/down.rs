//! `kvfabric cluster down [--dir DIR]`: stops every node whose pid file is in `DIR`.

use std::path::Path;
use std::time::Duration;

use super::{layout, procs};

/// Most node pid files `down` looks for (`node1.pid` … ).
const NODES_MAX: u64 = 256;

/// Stops the nodes of the cluster in `dir`; fails naming every one that survived.
pub fn run(dir: &Path, grace_s: u64) -> anyhow::Result<()> {
    if !dir.is_dir() {
        anyhow::bail!("{}: no such cluster directory", dir.display());
    }
    let stopped = stop_all(dir, Duration::from_secs(grace_s))?;
    println!("stopped {stopped} node(s) in {}", dir.display());
    Ok(())
}

/// Stops every node with a pid file in `dir` (the pid files are removed); returns how many
/// were running.
pub fn stop_all(dir: &Path, grace: Duration) -> anyhow::Result<usize> {
    let mut failures = Vec::new();
    let mut stopped = 0;
    for id in 1..=NODES_MAX {
        let pid_file = layout::pid_path(dir, id);
        // Ids may have gaps (a member removed by `cluster remove`): every pid file is looked for.
        let Some(pid) = procs::read_pid(&pid_file)? else {
            continue;
        };
        let config = layout::config_path(dir, id);
        let running = procs::is_node(pid, &config);
        match procs::stop(pid, &config, grace) {
            Ok(()) => {
                stopped += usize::from(running);
                let _ = std::fs::remove_file(&pid_file);
            }
            Err(e) => failures.push(format!("n{id}: {e:#}")),
        }
    }
    if !failures.is_empty() {
        anyhow::bail!("could not stop: {}", failures.join("; "));
    }
    Ok(stopped)
}
