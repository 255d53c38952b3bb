//! Disk tier under kill -9: a child process (this test binary, re-executed) appends and
//! frees blocks, printing `append <index>` before each write and `acked <hex id>` /
//! `freed <hex id>` after each call returns; the parent SIGKILLs it mid-append, reopens the
//! directory and checks that every acknowledged block is intact, no acknowledged free came
//! back, and nothing unverified is served.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use kvfabric_store::tier::disk::{DiskConfig, DiskTier};
use kvfabric_store::{Blake3Ids, BlockId, ByteCount, IdHasher, NamespaceKey, TierBackend};

const CHILD_DIR_ENV: &str = "KVFABRIC_CRASH_CHILD";
const CHILD_START_ENV: &str = "KVFABRIC_CRASH_START";
const CHILD_TEST: &str = "disk_crash_child_appends_until_killed";
/// Acks the parent waits for before each kill.
const ACKS_PER_ROUND: usize = 7;
const ROUNDS: u64 = 8;
/// Writes a child makes at most (it is normally killed long before).
const CHILD_WRITES_MAX: u64 = 10_000;

/// Block `i`: every fourth one a 4.5 MiB DeepSeek-V3 block, the others 64 KiB to ~1 MiB.
fn gen(i: u64) -> (BlockId, NamespaceKey, Vec<u8>) {
    let ns = NamespaceKey::derive("crash");
    let len = if i.is_multiple_of(4) {
        4_718_592
    } else {
        65_536 + (i as usize * 104_729) % 1_000_000
    };
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(len);
    (Blake3Ids.id(&ns, &[&bytes]), ns, bytes)
}

fn config(dir: &str) -> DiskConfig {
    let mut c = DiskConfig::new(dir, ByteCount(2 << 30));
    c.segment_bytes = 16 << 20; // rolls every few blocks, so a kill can land mid-roll too
    c.verify_writes = false; // the child spends its time appending, not hashing
    c
}

/// The child: runs only when re-executed by the parent with `KVFABRIC_CRASH_CHILD` set.
#[test]
fn disk_crash_child_appends_until_killed() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let start: u64 = std::env::var(CHILD_START_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("start index");
    let (mut tier, _) = DiskTier::open(config(&dir)).expect("child open");
    let mut out = std::io::stdout().lock();
    // The harness has printed `test NAME ... ` without a newline: start acks on a fresh line.
    writeln!(out).expect("stdout");
    for i in start..start + CHILD_WRITES_MAX {
        let (id, ns, bytes) = gen(i);
        writeln!(out, "append {i}")
            .and_then(|()| out.flush())
            .expect("stdout");
        let h = tier.write(&id, &ns, &bytes).expect("child write");
        writeln!(out, "acked {}", id.to_hex())
            .and_then(|()| out.flush())
            .expect("stdout");
        if i % 3 == 1 {
            tier.free(&h).expect("child free");
            writeln!(out, "freed {}", id.to_hex())
                .and_then(|()| out.flush())
                .expect("stdout");
        }
    }
}

#[test]
fn disk_crash_kill9_mid_append_keeps_every_acked_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_s = dir.path().to_str().expect("utf-8 path").to_string();
    let exe = std::env::current_exe().expect("current exe");
    // id → index, for every block any child may have started.
    let mut index_of: HashMap<BlockId, u64> = HashMap::new();
    let mut acked: HashSet<BlockId> = HashSet::new();
    let mut freed: HashSet<BlockId> = HashSet::new();
    // Acked blocks whose free was in flight at a kill: present or absent, both are right.
    let mut uncertain: HashSet<BlockId> = HashSet::new();
    let mut start = 0u64;
    let mut torn_total = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, &dir_s)
            .env(CHILD_START_ENV, start.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut acks = 0;
        let mut last = start;
        while acks < ACKS_PER_ROUND {
            let line = lines
                .next()
                .expect("child exited early")
                .expect("read child");
            if let Some(hex) = line.strip_prefix("acked ") {
                let id = BlockId::from_hex(hex).expect("hex id");
                assert_eq!(id, gen(last).0, "the child writes blocks in index order");
                acked.insert(id);
                index_of.insert(id, last);
                last += 1;
                acks += 1;
            } else if let Some(hex) = line.strip_prefix("freed ") {
                freed.insert(BlockId::from_hex(hex).expect("hex id"));
            }
        }
        // Wait until the child starts appending a 4.5 MiB block, let the append get under
        // way (varies by round: from before the header to well into the payload), kill -9.
        loop {
            let line = lines
                .next()
                .expect("child exited early")
                .expect("read child");
            if let Some(hex) = line.strip_prefix("acked ") {
                acked.insert(BlockId::from_hex(hex).expect("hex id"));
                index_of.insert(gen(last).0, last);
                last += 1;
            } else if let Some(hex) = line.strip_prefix("freed ") {
                freed.insert(BlockId::from_hex(hex).expect("hex id"));
            } else if let Some(i) = line.strip_prefix("append ") {
                if i.parse::<u64>().expect("index") % 4 == 0 {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_micros(round * 150));
        let pid = i32::try_from(child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 the child");
        child.wait().expect("reap child");
        // Drain what it printed before dying: later acks count too.
        for line in lines.map_while(Result::ok) {
            if let Some(hex) = line.strip_prefix("acked ") {
                let id = BlockId::from_hex(hex).expect("hex id");
                acked.insert(id);
                index_of.insert(id, last);
                last += 1;
            } else if let Some(hex) = line.strip_prefix("freed ") {
                freed.insert(BlockId::from_hex(hex).expect("hex id"));
            }
        }
        // The write in flight (index `last`) may or may not have completed, and so may the
        // free of the last acked block if the child frees it.
        index_of.insert(gen(last).0, last);
        let pending_free = last.checked_sub(1).filter(|i| i % 3 == 1).map(|i| gen(i).0);
        uncertain.extend(pending_free.filter(|id| !freed.contains(id)));
        start = last + 1;

        let (mut tier, recovered) = DiskTier::open(config(&dir_s)).expect("reopen after kill");
        let c = tier.counters();
        torn_total += c.torn_tails_truncated;
        println!(
            "round {round}: {} acked, {} freed, {} recovered; torn tails truncated {}, \
             headers skipped {}, quarantined {}",
            acked.len(),
            freed.len(),
            recovered.len(),
            c.torn_tails_truncated,
            c.headers_skipped,
            c.quarantined
        );
        assert_eq!(c.headers_skipped, 0, "a kill never garbles a header");
        assert_eq!(
            c.quarantined, 0,
            "a kill never leaves a full-length wrong entry"
        );
        let mut seen = HashSet::new();
        for r in &recovered {
            assert!(seen.insert(r.id), "block {} recovered twice", r.id);
            assert!(
                !freed.contains(&r.id),
                "acknowledged free of {} came back",
                r.id
            );
            let i = *index_of
                .get(&r.id)
                .unwrap_or_else(|| panic!("phantom block {}", r.id));
            let bytes = tier
                .read(&r.handle, &r.id)
                .expect("every recovered entry verifies");
            assert_eq!(bytes, gen(i).2, "block {i} reads back its own bytes");
        }
        for id in acked
            .difference(&freed)
            .filter(|id| !uncertain.contains(*id))
        {
            assert!(
                seen.contains(id),
                "acknowledged block {} (index {}) lost",
                id,
                index_of[id]
            );
        }
    }
    println!("torn tails truncated over {ROUNDS} kills: {torn_total}");
}
