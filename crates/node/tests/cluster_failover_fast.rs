//! Failover with real processes (`kvfabric cluster up`, separate node processes, QUIC on
//! loopback), reproducing what the issue measured: SIGKILL of the Raft leader (puts on the
//! survivors took ~7 s, then 1.5–2.7 s each for 40 s), SIGKILL of the owner listed first (a
//! get elsewhere took 10 s and answered 404 while the third node held a verified copy), and
//! HEAD answering 404 where GET answered 200.
//!
//! Assertions are on outcomes and counters; the timings are printed, not asserted (the
//! benchmark `kvfabric bench failover` compares them).

mod cluster_harness;
mod common;

use std::time::Instant;

use cluster_harness::{init_tracing, kvfabric, Cluster};
use common::{builtin, payload};

const MODEL: &str = "minicpm3-4b";

fn node(name: &str) -> u64 {
    name.trim_start_matches('n').parse().unwrap()
}

/// One `kvfabric_transport{stat}` or `kvfabric_peer_health{stat}` figure of node `id`.
fn stat(c: &Cluster, id: u64, family: &str, stat: &str) -> u64 {
    let want = format!("{family}{{node=\"n{id}\",stat=\"{stat}\"}} ");
    c.get(id, "/metrics")
        .map(|r| r.text())
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[test]
fn a_killed_leader_costs_one_election_then_puts_stay_fast() {
    init_tracing();
    let g = builtin(MODEL);
    let mut cluster = kvfabric().cluster(3);
    let (leader, _) = cluster.agreed_leader(&[1, 2, 3]);
    let dead = node(&leader);
    let survivors: Vec<u64> = (1..=3).filter(|n| *n != dead).collect();
    for (i, n) in survivors.iter().enumerate() {
        let r = cluster.put_block(*n, &g, &payload(&g, 500 + i as u64), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let failed_before: Vec<u64> = survivors
        .iter()
        .map(|n| stat(&cluster, *n, "kvfabric_transport", "pushes_failed"))
        .collect();

    tracing::info!(dead, "phase 1: SIGKILL of the leader");
    cluster.kill(dead);
    let killed = Instant::now();

    tracing::info!("phase 2: puts on the survivors right away, every one with both copies");
    let mut took = Vec::new();
    for i in 0..30u64 {
        let n = survivors[i as usize % 2];
        let started = Instant::now();
        let r = cluster.put_block(n, &g, &payload(&g, 600 + i), &[]);
        took.push((started.elapsed().as_millis(), killed.elapsed().as_millis()));
        assert_eq!(r.status, 201, "put {i} on n{n}: {}", r.text());
        assert_eq!(r.json()["replicas"], 2);
    }
    let first = took[0].0;
    let mut later: Vec<u128> = took[1..].iter().map(|t| t.0).collect();
    later.sort_unstable();
    tracing::info!(
        first_put_ms = first,
        later_p50_ms = later[later.len() / 2],
        later_max_ms = later[later.len() - 1],
        "puts after the kill (printed, not asserted)"
    );
    println!("failover: first put after the leader's SIGKILL {first} ms; the next 29: p50 {} ms, max {} ms", later[later.len() / 2], later[later.len() - 1]);

    tracing::info!("phase 3: each survivor tried the dead member at most once, and suspects it");
    for (n, before) in survivors.iter().zip(failed_before) {
        let failed = stat(&cluster, *n, "kvfabric_transport", "pushes_failed") - before;
        assert!(
            failed <= 1,
            "n{n}: {failed} pushes to the dead member failed"
        );
    }
    cluster.wait_for("a survivor to suspect the dead leader", || {
        survivors
            .iter()
            .any(|n| stat(&cluster, *n, "kvfabric_peer_health", "suspects") == 1)
            .then_some(())
    });
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}

#[test]
fn a_killed_first_owner_is_skipped_and_head_answers_as_get() {
    init_tracing();
    let g = builtin(MODEL);
    // No repair: once the killed owner's lease ran out, a pass would copy the block kept for
    // phase 4 to n3.
    let mut cluster = kvfabric().cluster_with(3, &["--cluster-set", "repair_interval_ms=0"]);
    cluster.agreed_leader(&[1, 2, 3]);

    tracing::info!("phase 1: blocks put on n1 and n2, copied elsewhere");
    // Enough blocks that some are held by n1 and n2 only even when a loaded machine makes a
    // put hedge its copy to n3 as well (a member slow to answer is suspected).
    let mut blocks = Vec::new();
    for i in 0..40u64 {
        let r = cluster.put_block(1 + i % 2, &g, &payload(&g, 700 + i), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
        blocks.push(r.json()["block"].as_str().unwrap().to_owned());
    }
    // A block n3 does not hold: its owners are two of n1, n2; same tier, so n3 ranks the
    // lower id first. Kill that one.
    let (id, owners) = blocks
        .iter()
        .find_map(|id| {
            let owners: Vec<u64> = (1..=3).filter(|n| cluster.holds(*n, id)).collect();
            (!owners.contains(&3)).then(|| (id.clone(), owners))
        })
        .expect("a block held by n1 and n2 only");
    let first = owners[0];
    let other = owners[1];
    let mut survivors_hold: Vec<String> = blocks
        .iter()
        .filter(|b| **b != id && !cluster.holds(3, b) && cluster.holds(other, b))
        .cloned()
        .collect();
    // Kept unread by n3 for phase 4, when every owner of it is dead: the earliest put, whose
    // hedged push (if any) has surely landed.
    assert!(!survivors_hold.is_empty(), "another block n3 does not hold");
    let reserved = survivors_hold.remove(0);

    tracing::info!(first, other, "phase 2: SIGKILL of the owner n3 ranks first");
    cluster.kill(first);

    tracing::info!("phase 3: HEAD on n3 answers as GET will: 200, from the other owner");
    let head = cluster.get_head(3, &id).expect("HEAD answered");
    assert_eq!(head.0, 200);
    assert_eq!(head.1.as_deref(), Some(format!("n{other}").as_str()));
    let started = Instant::now();
    let got = cluster
        .get(3, &format!("/v1/blocks/{id}"))
        .expect("answered");
    let took = started.elapsed().as_millis();
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(
        got.header("kvfabric-source"),
        Some(format!("n{other}").as_str())
    );
    println!("failover: a GET whose first-ranked owner was SIGKILLed took {took} ms (served by n{other})");
    for b in &survivors_hold {
        let r = cluster
            .get(3, &format!("/v1/blocks/{b}"))
            .expect("answered");
        assert_eq!(r.status, 200);
    }

    tracing::info!("phase 4: nobody's block 404 on HEAD and GET; both owners dead: 503 on both");
    let absent = "cd".repeat(32);
    assert_eq!(cluster.head_status(3, &absent), 404);
    assert_eq!(
        cluster
            .get(3, &format!("/v1/blocks/{absent}"))
            .unwrap()
            .status,
        404
    );
    cluster.kill(other);
    let fresh = reserved;
    let r = cluster.get(3, &format!("/v1/blocks/{fresh}")).unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "owners_unreachable");
    assert_eq!(cluster.head_status(3, &fresh), 503);
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
}
