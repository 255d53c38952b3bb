//! The etcd side: 3 etcd members started here on loopback (data under the bench dir), the same
//! records written through the v3 JSON gateway with the same client concurrency (one
//! keep-alive HTTP client per client thread), one `put` per record; then, labelled apart, the
//! same records again in `txn` batches of the directory's batch size; then lookups with
//! `serializable` (local) and default (linearizable) ranges.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kvfabric_progress::{Progress, Unit};

use crate::report::{block_of, dir_bytes, pick, rss_bytes, Latency, Side};
use crate::DirectoryArgs;

/// Members started.
const MEMBERS: usize = 3;
/// Longest wait for the members to report healthy.
const HEALTHY_MS_MAX: u64 = 30_000;
/// Records per `txn` (the directory's default `batch_records_max`).
const TXN_RECORDS: usize = 512;
/// Longest one HTTP call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

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
pub(super) fn run(a: &DirectoryArgs, work: &Path, procs: &Procs) -> anyhow::Result<Side> {
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
        let child = Command::new(&etcd)
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
            .args(["--max-txn-ops", &TXN_RECORDS.to_string()])
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
    let (rss_before, disk_before) = (rss(procs), dir_bytes(work));
    println!("etcd: registering {} records, one put each", a.records);
    let reg_s = clients(a, &client, "etcd registrations", put_one)?;
    let (rss_after, disk_after) = (rss(procs), dir_bytes(work));
    let per = |b: u64, a2: u64| a2.saturating_sub(b) as f64 / a.records as f64 / MEMBERS as f64;
    println!("etcd: {} puts in {reg_s:.2} s", a.records);

    let local = lookups(a, &client, true)?;
    let linearizable = lookups(a, &client, false)?;

    println!("etcd: registering the same records again in txn batches of {TXN_RECORDS}");
    let batches = a.records.div_ceil(TXN_RECORDS as u64);
    let batched = DirectoryArgs {
        records: batches,
        ..a.clone()
    };
    let records = a.records;
    let txn_s = clients(
        &batched,
        &client,
        "etcd txn batches",
        move |agent, url, b| {
            let first = b * TXN_RECORDS as u64;
            txn(agent, url, first..(first + TXN_RECORDS as u64).min(records))
        },
    )?;
    Ok(Side {
        reg_per_s: a.records as f64 / reg_s,
        reg_batched: Some((
            format!("etcd registrations, txn of {TXN_RECORDS} (records/s)"),
            a.records as f64 / txn_s,
        )),
        local,
        linearizable,
        mem: vec![
            (
                "RSS growth of the 3 etcd processes / records / 3".into(),
                per(rss_before, rss_after),
            ),
            (
                "data dir growth (WAL + bbolt) / records / 3".into(),
                per(disk_before, disk_after),
            ),
        ],
    })
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(CALL_TIMEOUT))
        .build()
        .into()
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

/// Runs `op(agent, endpoint, i)` for `i` in `0..a.records` on `a.clients` threads (thread `c`
/// on endpoint `c % 3`, with its own keep-alive agent), under a bar named `what`; returns the
/// seconds it took.
fn clients<F>(a: &DirectoryArgs, urls: &[String], what: &str, op: F) -> anyhow::Result<f64>
where
    F: Fn(&ureq::Agent, &str, u64) -> anyhow::Result<()> + Send + Sync + Copy + 'static,
{
    let t0 = Instant::now();
    let bar = Progress::new(what, a.records, Unit::Items("requests"));
    let handles: Vec<_> = (0..a.clients)
        .map(|c| {
            let url = urls[c % urls.len()].clone();
            let (records, clients, bar) = (a.records, a.clients as u64, bar.clone());
            std::thread::spawn(move || {
                let agent = agent();
                let mut i = c as u64;
                while i < records {
                    op(&agent, &url, i)?;
                    bar.inc(1);
                    i += clients;
                }
                Ok::<(), anyhow::Error>(())
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("an etcd client panicked"))??;
    }
    bar.finish();
    Ok(t0.elapsed().as_secs_f64())
}

/// Record `i` as etcd stores it: key = block id hex + owner, value = node/tier/epoch.
fn key_of(i: u64) -> String {
    let node = 101 + i % MEMBERS as u64;
    format!("{}/n{node}", block_of(i).to_hex())
}

fn value_of(i: u64) -> String {
    format!("node={} tier=host epoch=1", 101 + i % MEMBERS as u64)
}

fn post(
    agent: &ureq::Agent,
    url: &str,
    path: &str,
    body: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let mut r = agent
        .post(format!("{url}{path}"))
        .send(serde_json::to_vec(body)?.as_slice())
        .with_context(|| format!("POST {url}{path}"))?;
    let status = r.status();
    let text = r
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_string()?;
    if !status.is_success() {
        bail!(
            "POST {url}{path}: expected 200, found {status}: {}",
            text.chars().take(200).collect::<String>()
        );
    }
    Ok(serde_json::from_str(&text)?)
}

fn put_one(agent: &ureq::Agent, url: &str, i: u64) -> anyhow::Result<()> {
    let body =
        serde_json::json!({"key": b64(key_of(i).as_bytes()), "value": b64(value_of(i).as_bytes())});
    post(agent, url, "/v3/kv/put", &body).map(drop)
}

fn txn(agent: &ureq::Agent, url: &str, range: std::ops::Range<u64>) -> anyhow::Result<()> {
    let ops: Vec<_> = range
        .map(|i| serde_json::json!({"requestPut": {"key": b64(key_of(i).as_bytes()), "value": b64(value_of(i).as_bytes())}}))
        .collect();
    let v = post(
        agent,
        url,
        "/v3/kv/txn",
        &serde_json::json!({"success": ops}),
    )?;
    anyhow::ensure!(
        v.get("succeeded").and_then(|s| s.as_bool()) == Some(true),
        "txn: expected succeeded, found {v}"
    );
    Ok(())
}

fn lookups(a: &DirectoryArgs, urls: &[String], serializable: bool) -> anyhow::Result<Latency> {
    let what = if serializable {
        "etcd serializable lookups"
    } else {
        "etcd linearizable lookups"
    };
    let bar = Progress::new(what, a.lookups, Unit::Items("lookups"));
    let handles: Vec<_> = (0..a.clients)
        .map(|c| {
            let url = urls[c % urls.len()].clone();
            let (lookups, clients, records) = (a.lookups, a.clients as u64, a.records);
            let bar = bar.clone();
            std::thread::spawn(move || {
                let agent = agent();
                let mut samples = Vec::new();
                let mut k = c as u64;
                while k < lookups {
                    let i = pick(k, records);
                    let body = serde_json::json!({"key": b64(key_of(i).as_bytes()), "serializable": serializable});
                    let t = Instant::now();
                    let v = post(&agent, &url, "/v3/kv/range", &body)?;
                    samples.push(t.elapsed());
                    let n = v.get("kvs").and_then(|k| k.as_array()).map_or(0, |k| k.len());
                    anyhow::ensure!(n == 1, "range of record {i}: expected 1 kv, found {v}");
                    bar.inc(1);
                    k += clients;
                }
                Ok::<_, anyhow::Error>(samples)
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(
            h.join()
                .map_err(|_| anyhow::anyhow!("an etcd client panicked"))??,
        );
    }
    bar.finish();
    Ok(Latency::of(all))
}

/// Standard base64 with padding (what the gateway's JSON `bytes` fields take).
fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for ch in bytes.chunks(3) {
        let n = (u32::from(ch[0]) << 16)
            | (u32::from(*ch.get(1).unwrap_or(&0)) << 8)
            | u32::from(*ch.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= ch.len() {
                out.push(A[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::b64;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(b64(b""), "");
        assert_eq!(b64(b"f"), "Zg==");
        assert_eq!(b64(b"fo"), "Zm8=");
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(b64(b"foobar"), "Zm9vYmFy");
    }
}
