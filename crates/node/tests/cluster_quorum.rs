//! Quorum and durability of the directory with real processes:
//! - a member cut off from both others (they are stopped with SIGSTOP: from its side, a
//!   minority partition) cannot commit: a put there is refused with `directory_unavailable`
//!   and nothing it wrote appears in the directory; once the others resume, puts commit again;
//! - a majority stopped for longer than a lease expires nobody once it resumes: the leader
//!   waits half a lease in touch before it expires leases (`crates/directory/src/lease.rs`),
//!   so every node renews and keeps its epoch and its blocks;
//! - every committed entry survives a SIGKILL of every member at once: after all three
//!   restart, every chunk key put before resolves to its block again, held by its node (the
//!   blocks sit in the disk tier, which survives a crash; the host tier does not).

mod cluster_harness;
mod common;

use cluster_harness::{init_tracing, Cluster};
use common::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";

fn key(tag: &str, i: u64) -> String {
    blake3::hash(format!("{tag}-{i}").as_bytes())
        .to_hex()
        .to_string()
}

fn signal(cluster: &Cluster, id: u64, sig: i32) {
    // SAFETY: kill(2) on a pid this cluster started.
    let rc = unsafe { libc::kill(cluster.pid(id), sig) };
    assert_eq!(rc, 0, "signal {sig} to n{id}");
}

#[test]
fn an_isolated_member_cannot_commit_and_commits_again_once_the_others_return() {
    init_tracing();
    let g = builtin(MODEL);
    let mut cluster = cluster_harness::kvfabric().cluster_with(3, &["--replication", "1"]);
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 1: n2 and n3 stopped: n1 alone is a minority");
    signal(&cluster, 2, libc::SIGSTOP);
    signal(&cluster, 3, libc::SIGSTOP);
    // An entry committed just before the stops may still be applying on n1: wait until its
    // applied index holds still.
    let applied = cluster.wait_for("n1's applied index to hold still", || {
        let a = cluster.raft_stat(1, "last_applied")?;
        std::thread::sleep(std::time::Duration::from_millis(300));
        (cluster.raft_stat(1, "last_applied")? == a).then_some(a)
    });
    let k = key("minority", 0);
    let r = cluster.put_block(1, &g, &payload(&g, 70), &[("kvfabric-chunk-key", &k)]);
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "directory_unavailable");
    assert_eq!(
        cluster.raft_stat(1, "last_applied"),
        Some(applied),
        "nothing was applied without a majority"
    );
    assert_eq!(cluster.lookup(1, &k), (None, Vec::new()));

    tracing::info!("phase 2: the others resume; a put on n1 commits");
    signal(&cluster, 2, libc::SIGCONT);
    signal(&cluster, 3, libc::SIGCONT);
    cluster.agreed_leader(&[1, 2, 3]);
    let k2 = key("majority", 0);
    let r = cluster.wait_for("a put on n1 to commit", || {
        let r = cluster.put_block(1, &g, &payload(&g, 71), &[("kvfabric-chunk-key", &k2)]);
        (r.status == 201).then_some(r)
    });
    let id = r.json()["block"].as_str().unwrap().to_owned();
    for n in 1..=3 {
        cluster.wait_for("every replica to resolve the key", || {
            let (block, owners) = cluster.lookup(n, &k2);
            (block.as_deref() == Some(id.as_str()) && owners == ["n1"]).then_some(())
        });
    }
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}

#[test]
fn a_majority_stopped_past_the_lease_expires_nobody_once_it_resumes() {
    init_tracing();
    let g = builtin(MODEL);
    let lease_ms = 3_000;
    let lease = format!("lease_ms={lease_ms}");
    let mut cluster = cluster_harness::kvfabric()
        .cluster_with(3, &["--replication", "1", "--cluster-set", &lease]);
    let (leader, _) = cluster.agreed_leader(&[1, 2, 3]);
    let leader: u64 = leader.trim_start_matches('n').parse().unwrap();

    tracing::info!("phase 1: a block with a chunk key on each node");
    let mut put = Vec::new();
    for n in 1..=3u64 {
        let k = key("gap", n);
        let r = cluster.put_block(n, &g, &payload(&g, 90 + n), &[("kvfabric-chunk-key", &k)]);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        put.push((k, r.json()["block"].as_str().unwrap().to_owned(), n));
    }
    let epochs: Vec<u64> = (1..=3)
        .map(|n| cluster.raft_stat(n, "epoch").unwrap())
        .collect();

    tracing::info!(
        leader,
        "phase 2: both followers stopped for a lease and two seconds"
    );
    let followers: Vec<u64> = (1..=3).filter(|n| *n != leader).collect();
    for f in &followers {
        signal(&cluster, *f, libc::SIGSTOP);
    }
    std::thread::sleep(std::time::Duration::from_millis(lease_ms + 2_000));
    for f in &followers {
        signal(&cluster, *f, libc::SIGCONT);
    }

    // Either the leader kept its term (out of touch while no quorum answered) or a follower
    // won an election on resuming (a new term); both start the grace. Without the grace, a
    // leader that kept its term expired both followers (its expiry, proposed in the gap,
    // committed on their return); after an election the new leader's first check raced the
    // renewals. The in-process tests (`crates/directory/tests/directory/lease_grace.rs`) take
    // each path deterministically.
    let (now_leading, term) = cluster.agreed_leader(&[1, 2, 3]);
    tracing::info!(
        now_leading,
        term,
        "phase 3: two leases later nobody was expired"
    );
    std::thread::sleep(std::time::Duration::from_millis(2 * lease_ms));
    let after: Vec<u64> = (1..=3)
        .map(|n| cluster.raft_stat(n, "epoch").unwrap())
        .collect();
    assert_eq!(after, epochs, "a node lost its lease and joined again");
    for n in 1..=3 {
        for (k, id, node) in &put {
            let (block, owners) = cluster.lookup(n, k);
            assert_eq!(block.as_deref(), Some(id.as_str()), "n{n}: {k}");
            assert_eq!(owners, [format!("n{node}")], "n{n}: {k}");
        }
    }
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}

#[test]
fn committed_entries_survive_a_kill_of_every_member() {
    init_tracing();
    let g = builtin(MODEL);
    // One copy per block: after the restart only each block's own node can vouch for it. A
    // host tier of one block: each node's third put pushes its first two to disk.
    let mut cluster = cluster_harness::kvfabric()
        .cluster_with(3, &["--replication", "1", "--host-bytes", "3 MiB"]);
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 1: six blocks with chunk keys, two per node, on disk, committed");
    let mut put = Vec::new();
    for i in 0..9u64 {
        let node = 1 + i % 3;
        let k = key("durable", i);
        let keyed = i < 6;
        let headers = [("kvfabric-chunk-key", k.as_str())];
        let extra: &[(&str, &str)] = if keyed { &headers } else { &[] };
        let r = cluster.put_block(node, &g, &payload(&g, 80 + i), extra);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        if keyed {
            put.push((k, r.json()["block"].as_str().unwrap().to_owned(), node));
        }
    }
    for (_, id, node) in &put {
        assert_eq!(
            cluster.head_block(*node, id),
            (200, Some("disk".to_owned()))
        );
    }
    for n in 1..=3 {
        for (k, id, node) in &put {
            cluster.wait_for("every replica to resolve every key", || {
                let (block, owners) = cluster.lookup(n, k);
                (block.as_deref() == Some(id.as_str()) && owners == [format!("n{node}")])
                    .then_some(())
            });
        }
    }
    let logs: Vec<u64> = (1..=3)
        .map(|n| cluster.raft_stat(n, "last_log").unwrap())
        .collect();

    tracing::info!(?logs, "phase 2: SIGKILL all three, start all three");
    for n in 1..=3 {
        cluster.kill(n);
    }
    for n in 1..=3 {
        cluster.restart(n);
    }
    for n in 1..=3 {
        cluster.wait_for("the node ready again", || cluster.ready(n).then_some(()));
    }
    for (n, before) in (1..=3).zip(&logs) {
        let after = cluster.raft_stat(n, "last_log").unwrap();
        assert!(after >= *before, "n{n}: log {after} after {before}");
    }

    tracing::info!("phase 3: every key resolves to its block, owned by its node, everywhere");
    for n in 1..=3 {
        for (k, id, node) in &put {
            cluster.wait_for("every key resolved again", || {
                let (block, owners) = cluster.lookup(n, k);
                (block.as_deref() == Some(id.as_str()) && owners == [format!("n{node}")])
                    .then_some(())
            });
        }
    }
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
