//! The etcd side: 3 etcd members started here on loopback (data under the bench dir), driven
//! through etcd's gRPC API (the `etcd-client` crate: one HTTP/2 connection per client) with
//! the same client concurrency as the kvfabric side, client `c` on member `c % 3`: one `put`
//! per record, then as many records again in `txn`s of [`BATCH_RECORDS`] puts, then `range`
//! lookups, serializable (local) and linearizable (the default).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use etcd_client::{GetOptions, KvClient, Txn, TxnOp};

use crate::drive::closed_loop;
use crate::report::{
    block_of, dir_bytes, key_of, pick, rss_bytes, Latency, Memory, Side, BATCH_RECORDS,
};
use crate::DirectoryArgs;

/// Members started.
const MEMBERS: usize = 3;
/// Longest wait for the members to report healthy.
const HEALTHY_MS_MAX: u64 = 30_000;
/// Longest one health probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The processes this bench started; stopped by [`Procs::stop_all`] (also on Ctrl-C and drop of
/// the last guard).
#[derive(Debug, Clone, Default)]
pub(super) struct Procs(Arc<Mutex<Vec<Child>>>);

impl Procs {
    fn push(&self, c: Child) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    fn pids(&self) -> Vec<u32> {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().map(|c| c.id()).collect()
    }

    /// Kills and reaps every process started.
    pub(super) fn stop_all(&self) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for mut c in g.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn find_etcd() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs the etcd side in `work`.
pub(super) fn run(
    rt: &tokio::runtime::Runtime,
    a: &DirectoryArgs,
    work: &Path,
    procs: &Procs,
) -> anyhow::Result<Side> {
    let etcd = match find_etcd() {
        Some(p) => p,
        None => {
            println!("etcd: not found; running `apt-get install -y etcd-server etcd-client`");
            let st = Command::new("apt-get")
                .args(["install", "-y", "etcd-server", "etcd-client"])
                .stdout(Stdio::null())
                .status()
                .context("running apt-get")?;
            match find_etcd() {
                Some(p) if st.success() => p,
                _ => bail!("etcd: expected an `etcd` binary on PATH after apt-get ({st}); pass --skip-etcd to run without it"),
            }
        }
    };
    std::fs::create_dir_all(work)?;
    let mut client = Vec::new();
    let mut peer = Vec::new();
    for _ in 0..MEMBERS {
        client.push(format!("http://127.0.0.1:{}", free_port()?));
        peer.push(format!("http://127.0.0.1:{}", free_port()?));
    }
    let initial: Vec<String> = (0..MEMBERS).map(|i| format!("e{i}={}", peer[i])).collect();
    for i in 0..MEMBERS {
        let log = std::fs::File::create(work.join(format!("e{i}.log")))?;
        let mut cmd = Command::new(&etcd);
        // Go's threads: `--member-threads`, else Go's default (one per core), whatever this
        // process's environment says.
        match a.member_threads {
            Some(n) => cmd.env("GOMAXPROCS", n.to_string()),
            None => cmd.env_remove("GOMAXPROCS"),
        };
        let child = cmd
            .arg("--name")
            .arg(format!("e{i}"))
            .arg("--data-dir")
            .arg(work.join(format!("e{i}")))
            .args(["--listen-client-urls", &client[i]])
            .args(["--advertise-client-urls", &client[i]])
            .args(["--listen-peer-urls", &peer[i]])
            .args(["--initial-advertise-peer-urls", &peer[i]])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "kvfabric-bench"])
            .args(["--max-txn-ops", &BATCH_RECORDS.to_string()])
            .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
            .args(["--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", etcd.display()))?;
        procs.push(child);
    }
    println!(
        "etcd: {} ({}); 3 members on {}",
        etcd.display(),
        version(&etcd),
        client.join(", ")
    );
    let agent = agent();
    let deadline = Instant::now() + Duration::from_millis(HEALTHY_MS_MAX);
    for c in &client {
        while !healthy(&agent, c) {
            if Instant::now() > deadline {
                bail!(
                    "etcd at {c}: not healthy within {HEALTHY_MS_MAX} ms (see {})",
                    work.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    let rss = |procs: &Procs| {
        procs
            .pids()
            .iter()
            .filter_map(|p| rss_bytes(*p))
            .sum::<u64>()
    };
    let handle = rt.handle();
    let conn = |c: usize| -> anyhow::Result<KvClient> {
        let url = &client[c % client.len()];
        let c = handle
            .block_on(etcd_client::Client::connect([url.as_str()], None))
            .with_context(|| format!("connecting to etcd at {url}"))?;
        Ok(c.kv_client())
    };

    let (rss_before, disk_before) = (rss(procs), dir_bytes(work));
    println!("etcd: registering {} records, one put each", a.records);
    let one = closed_loop(
        a.clients,
        a.records,
        "etcd registrations",
        "records",
        conn,
        |kv, i| {
            handle.block_on(kv.put(key(i), value_of(i), None))?;
            Ok(())
        },
    )?;
    let (rss_after, disk_after) = (rss(procs), dir_bytes(work));
    println!("etcd: {} puts in {:.2} s", a.records, one.seconds);

    println!(
        "etcd: registering {} more records in txns of {BATCH_RECORDS} puts",
        a.records
    );
    let (first, end) = (a.records, 2 * a.records);
    let batched = closed_loop(
        a.clients,
        a.records.div_ceil(BATCH_RECORDS),
        "etcd txn batches",
        "requests",
        conn,
        |kv, b| {
            let from = first + b * BATCH_RECORDS;
            let ops: Vec<TxnOp> = (from..(from + BATCH_RECORDS).min(end))
                .map(|i| TxnOp::put(key(i), value_of(i), None))
                .collect();
            let r = handle.block_on(kv.txn(Txn::new().and_then(ops)))?;
            anyhow::ensure!(r.succeeded(), "txn of batch {b}: not succeeded");
            Ok(())
        },
    )?;
    println!("etcd: {} records in {:.2} s", a.records, batched.seconds);

    let lookups = |serializable: bool| -> anyhow::Result<Latency> {
        let what = if serializable {
            "etcd serializable lookups"
        } else {
            "etcd linearizable lookups"
        };
        let r = closed_loop(a.clients, a.lookups, what, "lookups", conn, |kv, k| {
            let i = pick(k, end);
            let opts = serializable.then(|| GetOptions::new().with_serializable());
            let r = handle.block_on(kv.get(key(i), opts))?;
            let found = r.kvs().first().map(|kv| kv.value().to_vec());
            anyhow::ensure!(
                found.as_deref() == Some(value_of(i).as_bytes()),
                "range of record {i}: expected its value, found {} kvs",
                r.kvs().len()
            );
            Ok(())
        })?;
        Ok(Latency::of(r.samples))
    };
    let local = lookups(true)?;
    let linearizable = lookups(false)?;
    let per = |b: u64, a2: u64| a2.saturating_sub(b) as f64 / a.records as f64 / MEMBERS as f64;
    Ok(Side {
        reg_per_s: a.records as f64 / one.seconds,
        batched_per_s: a.records as f64 / batched.seconds,
        local,
        linearizable,
        mem: vec![
            Memory {
                what: "RSS growth",
                how:
                    "RSS growth of the 3 etcd processes over the one-per-request puts / records / 3"
                        .into(),
                bytes: per(rss_before, rss_after),
            },
            Memory {
                what: "data dir growth",
                how: "data dir growth (WAL + bbolt) / records / 3".into(),
                bytes: per(disk_before, disk_after),
            },
        ],
    })
}

fn agent() -> ureq::Agent {
    kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(PROBE_TIMEOUT))
            .build(),
    )
}

fn version(etcd: &Path) -> String {
    Command::new(etcd)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "version unknown".into())
}

fn healthy(agent: &ureq::Agent, url: &str) -> bool {
    agent
        .get(format!("{url}/health"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .is_some_and(|b| b.contains("\"true\""))
}

/// Record `i` as etcd stores it: its chunk key names it.
fn key(i: u64) -> String {
    format!("chunk/{}", key_of(i))
}

/// Its value: the block and an owner.
fn value_of(i: u64) -> String {
    format!(
        "block={} node=n{} tier=host epoch=1",
        block_of(i).to_hex(),
        1 + i % MEMBERS as u64
    )
}
