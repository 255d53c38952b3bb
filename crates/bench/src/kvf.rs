//! The kvfabric side: a 3-node cluster of `kvfabric node` processes started with `cluster up`
//! (each a directory member with its own store, Raft over QUIC mTLS between them, with etcd's
//! default Raft timing: [`RAFT_TIMING`]), driven
//! through each node's HTTP API like any client: registrations with
//! `POST /v1/operator/claims` (one record per request, then batches), lookups with
//! `POST /v1/lookup` at both consistencies. Client `c` talks to node `c % 3` (followers
//! forward to the leader, as a node's own registrations do). The cluster is stopped with
//! `cluster down` whatever happens, and the run checks no node is left.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::drive::closed_loop;
use crate::report::{
    block_of, dir_bytes, key_of, pick, rss_bytes, Latency, Memory, Side, BATCH_RECORDS,
};
use crate::DirectoryArgs;
use kvfabric_tools::cluster::{layout, procs};
use kvfabric_tools::demo;

/// Raft timing of the bench's nodes: etcd's defaults (heartbeat 100 ms, election timeout
/// 1000 ms, which etcd draws up to twice), the same as the etcd side runs with, and the
/// directory's default RPC bound (2 s). The node's own failover timing (elections after
/// 200–350 ms, RPCs cut at 1 s) changed leaders a dozen times in a minute when other builds
/// held the two cores, and with 1 s RPCs batched claims ran into the 10 s write bound in 2 of
/// 3 runs of the test there (none in the runs since).
const RAFT_TIMING: [&str; 4] = [
    "heartbeat_interval_ms=100",
    "election_timeout_min_ms=1000",
    "election_timeout_max_ms=2000",
    "rpc_timeout_ms=2000",
];
/// Nodes (directory members) started.
const NODES: u64 = 3;
/// Longest one HTTP call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest answer read (a lookup's JSON).
const ANSWER_BYTES_MAX: u64 = 1 << 20;

/// Runs the kvfabric side in `work` (a fresh cluster directory).
pub(super) fn run(a: &DirectoryArgs, work: &Path) -> anyhow::Result<Side> {
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let delay = a
        .batch_delay_ms
        .map(|ms| format!("batch_delay_ms_max={ms}"));
    let threads = a.member_threads.map(|n| n.to_string());
    let mut up = vec!["--nodes", "3", "--timeout-s", "120"];
    if let Some(n) = &threads {
        up.extend(["--worker-threads", n.as_str()]);
    }
    for timing in RAFT_TIMING {
        up.extend(["--cluster-set", timing]);
    }
    if let Some(d) = &delay {
        up.extend(["--cluster-set", d.as_str()]);
    }
    for set in &a.cluster_set {
        up.extend(["--cluster-set", set.as_str()]);
    }
    let result = demo::cluster_command(work, "up", &up).and_then(|()| measure(a, work));
    let down = stop(work);
    match (result, down) {
        (Ok(side), Ok(())) => Ok(side),
        (Err(e), _) => Err(e),
        (Ok(_), Err(d)) => Err(d.context("stopping the kvfabric cluster")),
    }
}

/// Stops the cluster in `work` (if one was started) and checks no node is left.
pub(super) fn stop(work: &Path) -> anyhow::Result<()> {
    if !layout::config_path(work, 1).exists() {
        return Ok(());
    }
    demo::cluster_command(work, "down", &["--grace-s", "10"])?;
    demo::none_running(work)
}

/// One client's connection: a keep-alive agent, its node, the operator's token.
struct Conn {
    agent: ureq::Agent,
    node: String,
    auth: String,
}

impl Conn {
    fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let mut r = self
            .agent
            .post(format!("{}{path}", self.node))
            .header("authorization", &self.auth)
            .header("content-type", "application/json")
            .send(serde_json::to_vec(body)?.as_slice())
            .with_context(|| format!("POST {}{path}", self.node))?;
        let status = r.status();
        let text = r
            .body_mut()
            .with_config()
            .limit(ANSWER_BYTES_MAX)
            .read_to_string()?;
        if !status.is_success() {
            bail!(
                "POST {}{path}: expected 200, found {status}: {}",
                self.node,
                text.chars().take(300).collect::<String>()
            );
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// Claims records `range` in one request.
    fn claim(&self, range: std::ops::Range<u64>) -> anyhow::Result<()> {
        let n = range.end - range.start;
        let claims: Vec<Value> = range
            .map(|i| json!({"block": block_of(i).to_hex(), "key": key_of(i)}))
            .collect();
        let v = self.post("/v1/operator/claims", &json!({ "claims": claims }))?;
        anyhow::ensure!(
            v.get("claimed").and_then(Value::as_u64) == Some(n),
            "claims: expected {{\"claimed\": {n}}}, found {v}"
        );
        Ok(())
    }

    /// Looks record `i` up by its chunk key; it must resolve to its block with one owner.
    fn lookup(&self, i: u64, consistency: &str) -> anyhow::Result<()> {
        let v = self.post(
            &format!("/v1/lookup?consistency={consistency}"),
            &json!({"keys": [key_of(i)]}),
        )?;
        let r = v.pointer("/results/0");
        let block = r.and_then(|r| r.get("block")).and_then(Value::as_str);
        let owners = r
            .and_then(|r| r.get("owners"))
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        anyhow::ensure!(
            block == Some(block_of(i).to_hex().as_str()) && owners == 1,
            "lookup of record {i}: expected its block with one owner, found {v}"
        );
        Ok(())
    }
}

fn connect(urls: &[String], token: &str, c: usize) -> Conn {
    Conn {
        agent: kvfabric_http_client::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(CALL_TIMEOUT))
                .build(),
        ),
        node: urls[c % urls.len()].clone(),
        auth: format!("Bearer {token}"),
    }
}

fn measure(a: &DirectoryArgs, work: &Path) -> anyhow::Result<Side> {
    let urls = demo::node_urls(work)?;
    let token = layout::read_operator_token(work)?;
    let conn = |c: usize| -> anyhow::Result<Conn> { Ok(connect(&urls, &token, c)) };
    let pids: Vec<u32> = (1..=NODES)
        .map(|id| procs::read_pid(&layout::pid_path(work, id)))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .map(|p| p as u32)
        .collect();
    let rss = || pids.iter().filter_map(|p| rss_bytes(*p)).sum::<u64>();
    let disk = || {
        (1..=NODES)
            .map(|id| dir_bytes(&layout::data_path(work, id)))
            .sum::<u64>()
    };

    println!(
        "kvfabric: registering {} records, one per request",
        a.records
    );
    let (rss_before, disk_before) = (rss(), disk());
    let one = closed_loop(
        a.clients,
        a.records,
        "kvfabric registrations",
        "records",
        conn,
        |c, i| c.claim(i..i + 1),
    )?;
    let (rss_after, disk_after) = (rss(), disk());
    println!(
        "kvfabric: {} records committed in {:.2} s",
        a.records, one.seconds
    );

    let batches = a.records.div_ceil(BATCH_RECORDS);
    println!(
        "kvfabric: registering {} more records, {BATCH_RECORDS} per request",
        a.records
    );
    let (first, end) = (a.records, 2 * a.records);
    let batched = closed_loop(
        a.clients,
        batches,
        "kvfabric batched registrations",
        "requests",
        conn,
        |c, b| {
            let from = first + b * BATCH_RECORDS;
            c.claim(from..(from + BATCH_RECORDS).min(end))
        },
    )?;
    println!(
        "kvfabric: {} records committed in {:.2} s",
        a.records, batched.seconds
    );

    // A linearizable read on every node first: each has then applied every record, so a
    // local read finds it.
    for c in 0..urls.len() {
        connect(&urls, &token, c).lookup(end - 1, "linearizable")?;
    }
    let lookups = |consistency: &'static str| -> anyhow::Result<Latency> {
        let r = closed_loop(
            a.clients,
            a.lookups,
            &format!("kvfabric {consistency} lookups"),
            "lookups",
            conn,
            |c, k| c.lookup(pick(k, end), consistency),
        )?;
        Ok(Latency::of(r.samples))
    };
    let local = lookups("local")?;
    let linearizable = lookups("linearizable")?;
    let per = |b: u64, a2: u64| a2.saturating_sub(b) as f64 / a.records as f64 / NODES as f64;
    Ok(Side {
        reg_per_s: a.records as f64 / one.seconds,
        batched_per_s: a.records as f64 / batched.seconds,
        local,
        linearizable,
        mem: vec![
            Memory {
                what: "RSS growth",
                how: "RSS growth of the 3 node processes over the one-per-request registrations / records / 3".into(),
                bytes: per(rss_before, rss_after),
            },
            Memory {
                what: "data dir growth",
                how: "data dir growth (WAL + redb snapshot) / records / 3".into(),
                bytes: per(disk_before, disk_after),
            },
        ],
    })
}
