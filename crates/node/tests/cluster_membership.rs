//! Live membership with real node processes (`kvfabric cluster add` / `remove`):
//!
//! - grow 3 → 5 under a put/get load: every read of an acknowledged block succeeds with its
//!   bytes; the new members are voters, healthy on every node, and take copies;
//! - shrink 5 → 3 under the same load: every acknowledged block is still there, bytes equal,
//!   with at least `replication` live owners, and the removed members are gone from every
//!   view;
//! - a removal cut short by killing its coordinator, the Raft leader: the leaving member stays
//!   a learner (no vote, its blocks still served, a put it takes waits for copies on voters),
//!   the membership agrees on every node under the next leader, and asking again (of another
//!   member) resumes and completes it;
//! - a member that is down is removed without waiting for a drain it cannot do, and its
//!   blocks are re-replicated by their other holders to two live copies on the voters.

mod cluster_harness;
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cluster_harness::{init_tracing, one_cluster_at_a_time, Cluster};
use common::{builtin, payload};
use kvfabric_store::ModelGeometry;

const MODEL: &str = "deepseek-v2-lite";

/// An acknowledged put: its chunk key, block id and the blake3 of its payload.
#[derive(Debug, Clone)]
struct Acked {
    key: String,
    block: String,
    hash: blake3::Hash,
}

/// What a load run saw.
#[derive(Debug, Default)]
struct Seen {
    acked: Vec<Acked>,
    put_failures: Vec<String>,
    reads_ok: u64,
    read_failures: Vec<String>,
}

/// Puts on `put_to` and gets of acknowledged blocks from `read_from`, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    handle: Option<JoinHandle<()>>,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

impl Load {
    fn start(
        g: ModelGeometry,
        put_to: Arc<Mutex<Vec<String>>>,
        read_from: Arc<Mutex<Vec<String>>>,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let handle = std::thread::spawn(move || {
            let agent = agent();
            let tokens = g.block_tokens().to_string();
            let mut seed = 1000u64;
            while !stop2.load(Ordering::Relaxed) {
                seed += 1;
                let targets = put_to.lock().unwrap().clone();
                let api = &targets[seed as usize % targets.len()];
                let bytes = payload(&g, seed);
                let key = blake3::hash(&seed.to_le_bytes()).to_hex().to_string();
                let r = agent
                    .put(format!("{api}/v1/blocks"))
                    .header("kvfabric-model", &g.name)
                    .header("kvfabric-tokens", &tokens)
                    .header("kvfabric-chunk-key", &key)
                    .send(&bytes[..]);
                let mut s = seen2.lock().unwrap();
                match r.map(|mut r| (r.status().as_u16(), r.body_mut().read_to_string())) {
                    Ok((201, Ok(body))) => {
                        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                        s.acked.push(Acked {
                            key,
                            block: v["block"].as_str().unwrap().to_owned(),
                            hash: blake3::hash(&bytes),
                        });
                    }
                    Ok((status, body)) => s.put_failures.push(format!("{api}: {status} {body:?}")),
                    Err(e) => s.put_failures.push(format!("{api}: {e}")),
                }
                let Some(a) = s
                    .acked
                    .get((seed as usize * 7919) % s.acked.len().max(1))
                    .cloned()
                else {
                    continue;
                };
                drop(s);
                let readers = read_from.lock().unwrap().clone();
                let api = &readers[(seed as usize / 3) % readers.len()];
                let got = agent
                    .get(format!("{api}/v1/blocks/{}", a.block))
                    .call()
                    .map(|mut r| {
                        (
                            r.status().as_u16(),
                            r.body_mut().with_config().limit(64 << 20).read_to_vec(),
                        )
                    });
                let mut s = seen2.lock().unwrap();
                match got {
                    Ok((200, Ok(b))) if blake3::hash(&b) == a.hash => s.reads_ok += 1,
                    Ok((status, _)) => s.read_failures.push(format!("{api} {}: {status}", a.block)),
                    Err(e) => s.read_failures.push(format!("{api} {}: {e}", a.block)),
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        Load {
            stop,
            seen,
            handle: Some(handle),
        }
    }

    fn reads_ok(&self) -> u64 {
        self.seen.lock().unwrap().reads_ok
    }

    fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("the load thread");
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// Puts one block per seed on node `on` (chunk key from the seed); what was acknowledged.
fn put_acked(c: &Cluster, g: &ModelGeometry, on: u64, seeds: std::ops::Range<u64>) -> Vec<Acked> {
    seeds
        .map(|seed| {
            let bytes = payload(g, seed);
            let key = blake3::hash(&seed.to_le_bytes()).to_hex().to_string();
            let r = c.put_block(on, g, &bytes, &[("kvfabric-chunk-key", &key)]);
            assert_eq!(r.status, 201, "{}", r.text());
            Acked {
                key,
                block: r.json()["block"].as_str().unwrap().to_owned(),
                hash: blake3::hash(&bytes),
            }
        })
        .collect()
}

/// `(member, role)` of node `id`'s view, sorted.
fn roles(c: &Cluster, id: u64) -> Vec<(String, String)> {
    let mut r = c.view(id).expect("view").roles;
    r.sort();
    r
}

fn members(ids: &[u64]) -> BTreeSet<String> {
    ids.iter().map(|i| format!("n{i}")).collect()
}

/// Waits until every node in `on` lists exactly `want` as voters (leader or follower),
/// every one healthy.
fn wait_membership(c: &Cluster, on: &[u64], want: &[u64]) {
    let want = members(want);
    c.wait_for(&format!("membership {want:?} healthy on {on:?}"), || {
        on.iter()
            .all(|i| {
                let Some(v) = c.view(*i) else { return false };
                let voters: BTreeSet<String> = v
                    .roles
                    .iter()
                    .filter(|(_, r)| r == "leader" || r == "follower")
                    .map(|(m, _)| m.clone())
                    .collect();
                voters == want && v.roles.len() == want.len() && v.healthy.iter().all(|(_, h)| *h)
            })
            .then_some(())
    });
}

/// Every acknowledged block resolves by its chunk key, reads back with its bytes from `read`,
/// and has at least `r` live owners, none of them in `gone` (a removed member's records go
/// with its lease, `lease_ms` after it stopped).
fn assert_no_acked_block_lost(c: &Cluster, acked: &[Acked], read: u64, r: usize, gone: &[u64]) {
    let gone = members(gone);
    for a in acked {
        let what = format!("{} with {r} live owners, none removed", a.block);
        let (block, owners) = c.wait_for(&what, || {
            let (block, owners) = c.lookup(read, &a.key);
            let removed = owners.iter().any(|o| gone.contains(o));
            (owners.len() >= r && !removed).then_some((block, owners))
        });
        assert_eq!(block.as_deref(), Some(a.block.as_str()), "{}", a.key);
        assert!(
            owners.iter().all(|o| !gone.contains(o)),
            "{}: {owners:?}",
            a.block
        );
        let got = c
            .get(read, &format!("/v1/blocks/{}", a.block))
            .expect("get answered");
        assert_eq!(got.status, 200, "{}: {}", a.block, got.text());
        assert_eq!(blake3::hash(&got.body), a.hash, "{}: bytes differ", a.block);
    }
}

#[test]
fn grow_3_to_5_and_shrink_back_under_load_without_a_failed_read_or_a_lost_block() {
    let _one = one_cluster_at_a_time();
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: three nodes, a put/get load");
    let mut c = cluster_harness::kvfabric().cluster(3);
    c.agreed_leader(&[1, 2, 3]);
    let apis =
        |ids: &[u64], c: &Cluster| ids.iter().map(|i| c.api(*i).to_owned()).collect::<Vec<_>>();
    let put_to = Arc::new(Mutex::new(apis(&[1, 2, 3], &c)));
    let read_from = Arc::new(Mutex::new(apis(&[1, 2, 3], &c)));
    let load = Load::start(g.clone(), put_to.clone(), read_from.clone());
    c.wait_for("some reads under load", || {
        (load.reads_ok() >= 10).then_some(())
    });

    tracing::info!("phase 2: grow to five members while the load runs");
    for want in [4, 5] {
        let id = c.add_member();
        assert_eq!(id, want);
        let all: Vec<u64> = (1..=id).collect();
        wait_membership(&c, &all, &all);
        put_to.lock().unwrap().push(c.api(id).to_owned());
        read_from.lock().unwrap().push(c.api(id).to_owned());
    }
    let before = load.reads_ok();
    c.wait_for("reads through the new members", || {
        (load.reads_ok() >= before + 30).then_some(())
    });
    for n in [4, 5] {
        let held = c
            .get(n, "/metrics")
            .unwrap()
            .text()
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!("kvfabric_held_blocks{{node=\"n{n}\"}} "))
                    .map(|v| v.parse::<u64>().unwrap())
            })
            .unwrap_or(0);
        assert!(held > 0, "n{n} took copies");
    }
    let grown = load.finish();
    assert!(
        grown.read_failures.is_empty(),
        "reads failed while growing: {:?}",
        grown.read_failures
    );
    assert!(
        grown.reads_ok >= 40 && grown.acked.len() >= 20,
        "{} reads, {} puts",
        grown.reads_ok,
        grown.acked.len()
    );
    tracing::info!(puts = grown.acked.len(), reads = grown.reads_ok, put_failures = ?grown.put_failures, "grown");

    tracing::info!("phase 3: shrink to three members (n5, then n4) while the load runs");
    *put_to.lock().unwrap() = apis(&[1, 2, 3], &c);
    *read_from.lock().unwrap() = apis(&[1, 2, 3], &c);
    let load = Load::start(g.clone(), put_to.clone(), read_from.clone());
    for gone in [5, 4] {
        let (ok, out) = c.remove_member(gone);
        assert!(ok, "cluster remove --node {gone} failed:\n{out}");
        assert!(out.contains(&format!("n{gone} removed")), "{out}");
        let rest: Vec<u64> = (1..gone).collect();
        wait_membership(&c, &rest, &rest);
    }
    let before = load.reads_ok();
    c.wait_for("reads after the shrink", || {
        (load.reads_ok() >= before + 10).then_some(())
    });
    let shrunk = load.finish();
    assert!(
        shrunk.read_failures.is_empty(),
        "reads failed while shrinking: {:?}",
        shrunk.read_failures
    );
    for n in 1..=3 {
        assert_eq!(
            roles(&c, n).len(),
            3,
            "n{n} lists three members: {:?}",
            roles(&c, n)
        );
    }

    tracing::info!("phase 4: no acknowledged block is lost");
    let mut acked = grown.acked;
    acked.extend(shrunk.acked);
    assert_no_acked_block_lost(&c, &acked, 1, 2, &[4, 5]);
    assert!(
        !c.path().join("node5.toml").exists() && c.path().join("node5.removed.toml").exists(),
        "the removed member's config is set aside"
    );
}

#[test]
fn a_removal_cut_short_by_killing_its_coordinator_the_leader_resumes_when_asked_again() {
    let _one = one_cluster_at_a_time();
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: four nodes, blocks on every one");
    let mut c = cluster_harness::kvfabric().cluster(4);
    let (leader, _) = c.agreed_leader(&[1, 2, 3, 4]);
    let coordinator: u64 = leader.trim_start_matches('n').parse().unwrap();
    let leaving = if coordinator == 4 { 3 } else { 4 };
    let mut acked = put_acked(&c, &g, leaving, 2000..2024);

    tracing::info!(
        coordinator,
        leaving,
        "phase 2: the leader coordinates the removal and is killed once the leaver is a learner"
    );
    let url = format!("{}/v1/operator/members/n{leaving}", c.api(coordinator));
    let token = c.operator_token();
    let asked = std::thread::spawn(move || {
        agent()
            .delete(&url)
            .header("authorization", &format!("Bearer {token}"))
            .call()
            .map(|r| r.status().as_u16())
    });
    let others: Vec<u64> = (1..=4).filter(|n| *n != coordinator).collect();
    c.wait_for("the leaver demoted to a learner", || {
        roles(&c, others[0])
            .iter()
            .any(|(m, r)| *m == format!("n{leaving}") && r == "learner")
            .then_some(())
    });
    c.kill(coordinator);
    let _ = asked.join();

    tracing::info!("phase 3: the rest agree on the membership; the leaver is a learner and serves");
    let rest: Vec<u64> = others.iter().copied().filter(|n| *n != leaving).collect();
    // Right after the kill the rest may still agree on the killed leader: wait for a new one.
    c.wait_for("a new leader agreed by the rest", || {
        (c.agreed_leader(&others).0 != leader).then_some(())
    });
    for n in &others {
        let r = roles(&c, *n);
        assert!(
            r.contains(&(format!("n{leaving}"), "learner".into())),
            "n{n}: {r:?}"
        );
        assert!(
            r.iter().any(|(m, _)| *m == format!("n{coordinator}")),
            "the killed coordinator is still a member: {r:?}"
        );
    }
    let one = &acked[0];
    let got = c
        .get(leaving, &format!("/v1/blocks/{}", one.block))
        .unwrap();
    assert_eq!(got.status, 200, "the learner still serves its blocks");
    // A put the learner takes itself is acknowledged only with `replication` copies on voters.
    let bytes = payload(&g, 3000);
    let key = blake3::hash(b"put on the learner").to_hex().to_string();
    let r = c.put_block(leaving, &g, &bytes, &[("kvfabric-chunk-key", &key)]);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["replicas"], 2, "{}", r.text());
    let on_learner = Acked {
        key,
        block: r.json()["block"].as_str().unwrap().to_owned(),
        hash: blake3::hash(&bytes),
    };
    let (_, owners) = c.wait_for("the learner's put registered by its voters", || {
        let (b, owners) = c.lookup(rest[0], &on_learner.key);
        let on_voters = owners
            .iter()
            .filter(|o| **o != format!("n{leaving}"))
            .count();
        (b.is_some() && on_voters >= 2).then_some((b, owners))
    });
    assert!(
        !owners.contains(&format!("n{coordinator}")),
        "no copy on the dead coordinator: {owners:?}"
    );
    acked.push(on_learner);

    tracing::info!("phase 4: asked again (of a running member), the removal resumes and completes");
    let (ok, out) = c.remove_member(leaving);
    assert!(ok, "cluster remove failed:\n{out}");
    c.restart(coordinator);
    let mut voters = rest.clone();
    voters.push(coordinator);
    voters.sort();
    wait_membership(&c, &voters, &voters);
    assert_no_acked_block_lost(&c, &acked, rest[0], 2, &[leaving]);
}

#[test]
fn a_member_that_is_down_is_removed_without_a_drain_and_its_blocks_are_re_replicated() {
    let _one = one_cluster_at_a_time();
    init_tracing();
    let g = builtin(MODEL);
    tracing::info!("phase 1: four nodes (short leases, frequent repair), blocks put on n4");
    let mut c = cluster_harness::kvfabric().cluster_with(
        4,
        &[
            "--cluster-set",
            "lease_ms=3000",
            "--cluster-set",
            "repair_interval_ms=1000",
        ],
    );
    c.agreed_leader(&[1, 2, 3, 4]);
    let acked = put_acked(&c, &g, 4, 4000..4012);

    tracing::info!("phase 2: n4 dies; removing it does not wait for a drain it cannot do");
    c.kill(4);
    let (ok, out) = c.remove_member(4);
    assert!(ok, "cluster remove failed:\n{out}");
    assert!(out.contains("n4 removed (0 copies"), "{out}");
    wait_membership(&c, &[1, 2, 3], &[1, 2, 3]);

    tracing::info!("phase 3: every block is back to two live copies on the voters");
    assert_no_acked_block_lost(&c, &acked, 1, 2, &[4]);
}
