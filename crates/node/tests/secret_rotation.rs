//! Rotating the namespace secret on a real 3-node cluster, one node restarted at a time, as
//! docs/API.md ("Namespace secret") prescribes: `stage`, `promote`, `retire`, each followed by
//! a rolling restart. Throughout, every block put before is read back byte for byte and found
//! by its chunk key on every node (also in the middle of a roll, when members disagree on the
//! current secret); after `promote` puts get ids under the new secret; after `retire` the old
//! blocks are gone on every node, the nodes say so (`kvfabric_recovered_orphaned_total`), and
//! nothing else is.
//!
//! Blocks live on disk so that restarts keep them: the host tier holds one MiniCPM3 block, and
//! after the blocks under test are put or read (a hit promotes a block to RAM) each node
//! receives a later put of fresh bytes that pushes them down.

mod cluster_harness;

use cluster_harness::{kvfabric, Cluster};
use kvfabric_core::secret::{Secrets, SECRET_FILE};
use kvfabric_store::{Blake3Ids, BlockHeader, IdHasher, ModelGeometry, NamespaceKey};
use kvfabric_test_support::presets::{builtin, payload};

const NODES: [u64; 3] = [1, 2, 3];

fn id_under(key: &NamespaceKey, g: &ModelGeometry, payload: &[u8]) -> String {
    let header = BlockHeader::for_geometry(g).encode();
    Blake3Ids.id(key, &[&header, payload]).to_hex()
}

fn key(seed: u8) -> String {
    format!("{seed:02x}").repeat(32)
}

struct Rig {
    c: Cluster,
    g: ModelGeometry,
    file: std::path::PathBuf,
    fillers: std::cell::Cell<u64>,
}

impl Rig {
    fn put(&self, node: u64, seed: u64, chunk: Option<&str>) -> (String, String) {
        let extra: Vec<(&str, &str)> = chunk
            .map(|k| ("kvfabric-chunk-key", k))
            .into_iter()
            .collect();
        let r = self
            .c
            .put_block(node, &self.g, &payload(&self.g, seed), &extra);
        if r.status != 201 {
            let tails: Vec<String> = NODES
                .iter()
                .map(|n| {
                    let log = self.c.log(*n);
                    let lines: Vec<&str> = log.lines().rev().take(30).collect();
                    format!(
                        "--- n{n}\n{}",
                        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            panic!("put on n{node}: {}\n{}", r.text(), tails.join("\n"));
        }
        let v = r.json();
        (
            v["block"].as_str().unwrap().to_owned(),
            v["dedup"].as_str().unwrap().to_owned(),
        )
    }

    /// Every node serves `id` with the bytes of `seed` and resolves `chunk` to it; then the
    /// blocks those reads promoted to RAM are pushed back to disk.
    fn readable_everywhere(&self, id: &str, seed: u64, chunk: &str, when: &str) {
        // A lookup reads the node's own replica, which may trail the put by a commit.
        for n in NODES {
            self.c
                .wait_for(&format!("{when}: n{n} to resolve {chunk} to {id}"), || {
                    (self.c.lookup(n, chunk).0.as_deref() == Some(id)).then_some(())
                });
        }
        self.served_everywhere(id, seed, when);
    }

    /// Every node serves `id` with the bytes of `seed`; then the blocks those reads promoted
    /// to RAM are pushed back to disk.
    fn served_everywhere(&self, id: &str, seed: u64, when: &str) {
        let want = payload(&self.g, seed);
        for n in NODES {
            let r = self
                .c
                .get(n, &format!("/v1/blocks/{id}"))
                .unwrap_or_else(|| panic!("{when}: n{n} did not answer"));
            assert_eq!(r.status, 200, "{when}: n{n} GET {id}: {}", r.text());
            assert!(r.body == want, "{when}: n{n} served other bytes for {id}");
        }
        self.push_to_disk();
    }

    /// Pushes what each node last placed down to disk: one later put of fresh bytes per node
    /// (its own, after anything it received).
    fn push_to_disk(&self) {
        for n in NODES {
            let seed = 1_000 + self.fillers.get();
            self.fillers.set(self.fillers.get() + 1);
            self.put(n, seed, None);
        }
    }

    fn step(&self, step: &str) {
        let out = kvfabric()
            .command()
            .args(["secret", step, "--file"])
            .arg(&self.file)
            .output()
            .unwrap();
        assert!(out.status.success(), "secret {step}: {out:?}");
    }

    /// Restarts node `n` (SIGTERM; its disk tier survives, its RAM tier does not) and waits
    /// until it is ready.
    fn restart(&mut self, n: u64) {
        self.c.stop(n);
        self.c.restart(n);
        let c = &self.c;
        c.wait_for(&format!("n{n} ready again"), || c.ready(n).then_some(()));
        // Every member sees every member healthy again before the next put pushes to it.
        c.wait_for(&format!("n{n} healthy in every view"), || {
            NODES
                .iter()
                .all(|m| {
                    c.view(*m)
                        .is_some_and(|v| v.healthy.iter().all(|(_, h)| *h))
                })
                .then_some(())
        });
    }

    fn metric_sum(&self, name: &str) -> f64 {
        NODES
            .iter()
            .map(|n| {
                let text = self.c.get(*n, "/metrics").expect("metrics").text();
                text.lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            })
            .sum()
    }
}

#[test]
fn a_rolling_rotation_keeps_every_block_readable_until_the_old_secret_is_retired() {
    let c = Cluster::up(&kvfabric(), 3, &["--host-bytes", "3 MiB"]);
    let file = c.path().join("certs").join(SECRET_FILE);
    let mut rig = Rig {
        c,
        g: builtin("minicpm3-4b"),
        file,
        fillers: std::cell::Cell::new(0),
    };
    let s0 = Secrets::load(&rig.file).unwrap().current;
    let key0 = NamespaceKey::from_secret(&s0, "default");
    let (ka, kc) = (key(0xa1), key(0xc3));

    let (a, dedup) = rig.put(1, 1, Some(&ka));
    assert_eq!(dedup, "new");
    assert_eq!(a, id_under(&key0, &rig.g, &payload(&rig.g, 1)));
    rig.push_to_disk();
    rig.readable_everywhere(&a, 1, &ka, "before any rotation");

    // 1. Stage: every node learns to read under the new secret; puts keep the old one.
    rig.step("stage");
    let s1 = Secrets::load(&rig.file).unwrap().next.unwrap();
    let key1 = NamespaceKey::from_secret(&s1, "default");
    for n in NODES {
        rig.restart(n);
        rig.readable_everywhere(&a, 1, &ka, &format!("staging, n{n} restarted"));
    }
    let (b, _) = rig.put(2, 2, Some(&key(0xb2)));
    assert_eq!(
        b,
        id_under(&key0, &rig.g, &payload(&rig.g, 2)),
        "staged: puts unchanged"
    );
    rig.push_to_disk();

    // 2. Promote: n1 puts under the new secret while n2 and n3 still put under the old one,
    // and each reads what the other put.
    rig.step("promote");
    rig.restart(1);
    let (c_id, _) = rig.put(1, 3, Some(&kc));
    assert_eq!(
        c_id,
        id_under(&key1, &rig.g, &payload(&rig.g, 3)),
        "n1 promoted"
    );
    let (d, _) = rig.put(3, 4, Some(&key(0xd4)));
    assert_eq!(
        d,
        id_under(&key0, &rig.g, &payload(&rig.g, 4)),
        "n3 not yet"
    );
    rig.push_to_disk();
    for (id, seed, k) in [(&a, 1, &ka), (&c_id, 3, &kc), (&d, 4, &key(0xd4))] {
        rig.readable_everywhere(id, seed, k, "mid-promotion");
    }
    for n in [2, 3] {
        rig.restart(n);
        rig.readable_everywhere(&a, 1, &ka, &format!("promoting, n{n} restarted"));
        rig.readable_everywhere(&c_id, 3, &kc, &format!("promoting, n{n} restarted"));
    }
    // The old content put again is a new block under the new secret; the old one stays.
    let (a1, dedup) = rig.put(2, 1, Some(&ka));
    assert_eq!(dedup, "new");
    assert_eq!(a1, id_under(&key1, &rig.g, &payload(&rig.g, 1)));
    assert_ne!(a1, a);
    rig.push_to_disk();
    // The chunk key now names the new block; the old id still reads by id.
    rig.readable_everywhere(&a1, 1, &ka, "promoted: the chunk key names the new block");
    rig.served_everywhere(&a, 1, "promoted: the old id still reads");

    // 3. Retire: the old secret's blocks are gone on every node once restarted with it, and
    // each node that held one counts it; what was put under the new secret stays.
    let orphaned_before = rig.metric_sum("kvfabric_recovered_orphaned_total");
    assert_eq!(
        orphaned_before, 0.0,
        "nothing orphaned while a secret is readable"
    );
    rig.step("retire");
    for n in NODES {
        rig.restart(n);
    }
    for n in NODES {
        for old in [&a, &b, &d] {
            rig.c
                .get(n, &format!("/v1/blocks/{old}"))
                .unwrap()
                .assert_error(404, "not_found");
        }
    }
    rig.readable_everywhere(&c_id, 3, &kc, "retired");
    rig.readable_everywhere(&a1, 1, &ka, "retired: the key now names the new block");
    let orphaned = rig.metric_sum("kvfabric_recovered_orphaned_total");
    assert!(
        orphaned >= 6.0,
        "a, b and d had two holders each on disk: {orphaned} counted"
    );
}
