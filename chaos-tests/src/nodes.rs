//! The node processes of a run: started from the `kvfabric` binary with their configs, and
//! the process-level nemeses — SIGKILL and restart with the disk kept, SIGKILL and restart
//! with the block store wiped, SIGSTOP / SIGCONT, and corruption of on-disk block segments.
//!
//! Every process is in its own process group and is killed when [`Nodes`] drops (also on
//! panic); pid files let the next run remove the leftovers of a crashed one
//! ([`reap_leftovers`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::layout::NodeLayout;
use crate::rng::Rng;

/// Where every run's directory lives; the prefix leftovers are found by.
pub const RUNS_DIR: &str = "/tmp/kvfabric-chaos";

/// The running nodes.
pub struct Nodes {
    bin: PathBuf,
    /// Each node's layout.
    pub layout: Vec<NodeLayout>,
    children: Vec<Option<Child>>,
    paused: Vec<bool>,
    planted: Vec<Option<String>>,
    namespaces: Option<Vec<String>>,
}

fn pid_file(n: &NodeLayout) -> PathBuf {
    n.config.with_extension("pid")
}

impl Nodes {
    /// Prepares (does not start) the nodes; `planted[i]` is node `i+1`'s `KVFABRIC_PLANTED`.
    pub fn new(bin: PathBuf, layout: Vec<NodeLayout>, planted: Vec<Option<String>>) -> Nodes {
        let n = layout.len();
        Nodes {
            bin,
            layout,
            children: (0..n).map(|_| None).collect(),
            paused: vec![false; n],
            planted,
            namespaces: None,
        }
    }

    /// Runs node `i + 1` in network namespace `namespaces[i]` (`ip netns exec`, which execs
    /// the node: the child is the node process itself).
    pub fn in_namespaces(mut self, namespaces: Vec<String>) -> Nodes {
        self.namespaces = Some(namespaces);
        self
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.layout.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    fn idx(id: u64) -> usize {
        id as usize - 1
    }

    /// Starts node `id` (if it is not running).
    pub fn start(&mut self, id: u64) -> anyhow::Result<()> {
        let i = Self::idx(id);
        if self.children[i].is_some() {
            return Ok(());
        }
        let n = &self.layout[i];
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .with_context(|| format!("opening {}", n.log.display()))?;
        let mut c = match &self.namespaces {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns[i]]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        c.arg("node")
            .arg("--config")
            .arg(&n.config)
            .env_remove("RUST_LOG")
            .env_remove("KVFABRIC_PLANTED")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if let Some(p) = &self.planted[i] {
            c.env("KVFABRIC_PLANTED", p);
        }
        let child = c
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        std::fs::write(pid_file(n), child.id().to_string())?;
        self.children[i] = Some(child);
        self.paused[i] = false;
        Ok(())
    }

    /// Whether node `id` runs (not killed; it may be paused).
    pub fn is_up(&self, id: u64) -> bool {
        self.children[Self::idx(id)].is_some()
    }

    /// Whether node `id` is stopped by SIGSTOP.
    pub fn is_paused(&self, id: u64) -> bool {
        self.paused[Self::idx(id)]
    }

    fn signal(&self, id: u64, sig: i32) {
        if let Some(c) = &self.children[Self::idx(id)] {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    /// SIGKILL node `id` and reap it.
    pub fn kill9(&mut self, id: u64) {
        let i = Self::idx(id);
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused[i] = false;
        let _ = std::fs::remove_file(pid_file(&self.layout[i]));
    }

    /// SIGKILL node `id` and delete its block store (`data_dir/disk`); its Raft state stays,
    /// as a directory member's vote and log must (losing them is not a fault Raft tolerates).
    pub fn kill_and_wipe(&mut self, id: u64) {
        self.kill9(id);
        let _ = std::fs::remove_dir_all(self.layout[Self::idx(id)].data_dir.join("disk"));
    }

    /// SIGSTOP node `id`.
    pub fn pause(&mut self, id: u64) {
        if self.is_up(id) {
            self.signal(id, libc::SIGSTOP);
            self.paused[Self::idx(id)] = true;
        }
    }

    /// SIGCONT node `id`.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, libc::SIGCONT);
        self.paused[Self::idx(id)] = false;
    }

    /// Flips bytes in `count` random places of node `id`'s block segment files; returns how
    /// many bytes were flipped.
    pub fn corrupt_segments(&self, id: u64, rng: &mut Rng, count: usize) -> usize {
        let mut files = Vec::new();
        collect_files(
            &self.layout[Self::idx(id)].data_dir.join("disk"),
            &mut files,
        );
        files.sort();
        let files: Vec<_> = files.into_iter().filter(|(_, len)| *len > 64).collect();
        let mut flipped = 0;
        for _ in 0..count {
            if files.is_empty() {
                break;
            }
            let (path, len) = &files[rng.below(files.len() as u64) as usize];
            let at = rng.below(*len);
            if flip(path, at).is_ok() {
                flipped += 1;
            }
        }
        flipped
    }

    /// Node → blocks whose copy there failed verification and was dropped, from every node's
    /// log (each start appends to it): the lines the node writes as `lost a held copy …
    /// block=<id>`.
    pub fn rotted_copies(&self) -> BTreeMap<u64, BTreeSet<String>> {
        (1..=self.len() as u64)
            .map(|id| {
                let text =
                    std::fs::read_to_string(&self.layout[Self::idx(id)].log).unwrap_or_default();
                (id, rotted_in(&text))
            })
            .filter(|(_, b)| !b.is_empty())
            .collect()
    }

    /// The last `lines` lines of node `id`'s log.
    pub fn log_tail(&self, id: u64, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.layout[Self::idx(id)].log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Resumes and kills every node.
    pub fn stop_all(&mut self) {
        for id in 1..=self.len() as u64 {
            self.resume(id);
            self.kill9(id);
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The blocks a node log reports as lost to a failed verification.
fn rotted_in(log: &str) -> BTreeSet<String> {
    log.lines()
        .filter(|l| l.contains("lost a held copy"))
        .filter_map(|l| {
            let at = l.find("block=")? + "block=".len();
            let id = l.get(at..at + 64)?;
            id.bytes()
                .all(|b| b.is_ascii_hexdigit())
                .then(|| id.to_owned())
        })
        .collect()
}

fn collect_files(dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        match e.metadata() {
            Ok(m) if m.is_dir() => collect_files(&p, out),
            Ok(m) if m.is_file() => out.push((p, m.len())),
            _ => {}
        }
    }
}

fn flip(path: &Path, at: u64) -> std::io::Result<()> {
    let mut f = OpenOptions::new().read(true).write(true).open(path)?;
    f.seek(SeekFrom::Start(at))?;
    let mut b = [0u8; 1];
    f.read_exact(&mut b)?;
    b[0] ^= 0xff;
    f.seek(SeekFrom::Start(at))?;
    f.write_all(&b)
}

/// Kills node processes left by a crashed earlier run (found by their pid files under
/// [`RUNS_DIR`], checked to be `kvfabric` processes); `keep` (this run) is skipped. Returns
/// the number of processes killed.
pub fn reap_leftovers(keep: &Path) -> usize {
    let mut killed = 0;
    let Ok(runs) = std::fs::read_dir(RUNS_DIR) else {
        return 0;
    };
    for run in runs.flatten() {
        let dir = run.path();
        if dir == keep {
            continue;
        }
        // A run that is still going (its harness alive) is left alone.
        let owner: Option<i32> = std::fs::read_to_string(dir.join("harness.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        if owner.is_some_and(process_alive) {
            continue;
        }
        for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "pid")
                && p.file_name() != Some("harness.pid".as_ref())
            {
                let pid: Option<i32> = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
                if let Some(pid) = pid {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    if String::from_utf8_lossy(&cmd).contains("kvfabric") {
                        // SAFETY: plain kill(2) of a process that runs a kvfabric binary.
                        unsafe {
                            libc::kill(pid, libc::SIGCONT);
                            libc::kill(pid, libc::SIGKILL);
                        }
                        killed += 1;
                    }
                }
            }
        }
        // The directory stays (its logs explain the crash); the harness pid file goes, so
        // that the run is known to be over.
        let _ = std::fs::remove_file(dir.join("harness.pid"));
    }
    killed
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Polls `f` every 200 ms until it returns `Some`, `limit` passes or the run is interrupted
/// (SIGINT / SIGTERM; see [`crate::nemesis::interrupted`]).
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= limit || crate::nemesis::interrupted() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rotted_blocks_are_read_from_the_nodes_log_lines() {
        let id = "ab".repeat(32);
        let log = format!(
            "2026-12-01T20:00:00Z  WARN lost a held copy: its bytes failed verification and were quarantined block={id}\n\
             2026-12-01T20:00:01Z  INFO re-replicated block={}\n\
             2026-12-01T20:00:02Z  WARN lost a held copy block=nothex\n",
            "cd".repeat(32)
        );
        assert_eq!(super::rotted_in(&log).into_iter().collect::<Vec<_>>(), [id]);
    }
}
