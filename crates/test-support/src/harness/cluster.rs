//! [`Cluster`]: a real local cluster brought up by `kvfabric cluster up` in a temp directory
//! (separate node processes, OS-chosen loopback ports), with helpers to read each node's
//! `/v1/cluster` and `/metrics`, SIGKILL or restart one node, and `cluster down` on drop so
//! that no process outlives a test.
//!
//! Every wait is bounded by [`CLUSTER_TIMEOUT`], generous for a loaded 2-core machine; nothing
//! asserts on timing.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{Kvfabric, Reply};

/// Bound on every wait: readiness, elections, commits.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(120);
/// Per-request timeout of the test client.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Held by a test for the life of its cluster so that the clusters of one test binary run one
/// after another ([`one_cluster_at_a_time`]): tests that grow clusters to five members or kill
/// and restart them would otherwise start up to fifteen node processes at once on a 2-core
/// machine, and a node starved for seconds loses its Raft leadership or its lease, which is
/// what those tests must not see from the fabric itself.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits until no other test of this binary holds a cluster (see [`ONE_AT_A_TIME`]); a test
/// that panicked while holding it does not block the others.
pub fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running local cluster.
pub struct Cluster {
    /// Where `cluster up` keeps its files (removed on drop).
    pub dir: tempfile::TempDir,
    /// Each node's API address, node 1 first.
    pub apis: Vec<String>,
    bin: Kvfabric,
    agent: ureq::Agent,
    restarted: Vec<Child>,
}

/// One node's `/v1/cluster`, reduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The leader it names.
    pub leader: Option<String>,
    /// Its term.
    pub term: u64,
    /// `(member, role)`.
    pub roles: Vec<(String, String)>,
    /// `(member, healthy)`.
    pub healthy: Vec<(String, bool)>,
    /// Tier names listed per member.
    pub tiers: Vec<(String, Vec<String>)>,
}

impl Cluster {
    /// `kvfabric cluster up --nodes N --dir TEMP` with extra arguments (e.g. `--replication
    /// 3`); panics with its output if it fails.
    pub fn up(bin: &Kvfabric, nodes: u32, extra: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = bin
            .command()
            .args([
                "cluster",
                "up",
                "--nodes",
                &nodes.to_string(),
                "--timeout-s",
                "120",
            ])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("running cluster up");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "cluster up failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut apis = vec![String::new(); nodes as usize];
        for line in stdout.lines() {
            let mut parts = line.split_whitespace();
            if let (Some(id), Some(api), None) = (parts.next(), parts.next(), parts.next()) {
                if let Some(n) = id.strip_prefix('n').and_then(|n| n.parse::<usize>().ok()) {
                    if api.starts_with("http://") && n >= 1 && n <= apis.len() {
                        apis[n - 1] = api.to_owned();
                    }
                }
            }
        }
        assert!(
            apis.iter().all(|a| !a.is_empty()),
            "addresses missing in:\n{stdout}"
        );
        let agent = kvfabric_http_client::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(CALL_TIMEOUT))
                .build(),
        );
        Cluster {
            dir,
            apis,
            bin: bin.clone(),
            agent,
            restarted: Vec::new(),
        }
    }

    /// The cluster's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Node `id`'s config file.
    pub fn config(&self, id: u64) -> PathBuf {
        self.path().join(format!("node{id}.toml"))
    }

    /// Node `id`'s pid.
    pub fn pid(&self, id: u64) -> i32 {
        let p = self.path().join(format!("node{id}.pid"));
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .parse()
            .expect("a pid")
    }

    /// Node `id`'s log so far.
    pub fn log(&self, id: u64) -> String {
        std::fs::read_to_string(self.path().join(format!("node{id}.log"))).unwrap_or_default()
    }

    /// Node `id`'s API address.
    pub fn api(&self, id: u64) -> &str {
        &self.apis[id as usize - 1]
    }

    fn reply(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Option<Reply> {
        Reply::read(r.ok()?)
    }

    /// Any request to `path` on node `id` with `headers` (a bearer token among them) and a
    /// body (`None`: none); `None` if it did not answer.
    pub fn call(
        &self,
        id: u64,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Option<Reply> {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.api(id)));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body.unwrap_or_default().to_vec()).ok()?;
        Self::reply(self.agent.run(req))
    }

    /// GET `path` on node `id`; `None` if it did not answer.
    pub fn get(&self, id: u64, path: &str) -> Option<Reply> {
        Self::reply(self.agent.get(format!("{}{path}", self.api(id))).call())
    }

    /// The operator token `cluster up` wrote.
    pub fn operator_token(&self) -> String {
        let path = self.dir.path().join("operator.token");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// GET `path` on node `id` with the operator token; `None` if it did not answer.
    pub fn operator_get(&self, id: u64, path: &str) -> Option<Reply> {
        let auth = format!("Bearer {}", self.operator_token());
        Self::reply(
            self.agent
                .get(format!("{}{path}", self.api(id)))
                .header("authorization", &auth)
                .call(),
        )
    }

    /// POST JSON to `path` on node `id` with the operator token; `None` if it did not answer.
    pub fn operator_post(&self, id: u64, path: &str, body: &serde_json::Value) -> Option<Reply> {
        let auth = format!("Bearer {}", self.operator_token());
        Self::reply(
            self.agent
                .post(format!("{}{path}", self.api(id)))
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(serde_json::to_vec(body).unwrap().as_slice()),
        )
    }

    /// PUT `body` to `path` on node `id` with `headers`.
    pub fn put(&self, id: u64, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<Reply> {
        let mut req = self.agent.put(format!("{}{path}", self.api(id)));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::reply(req.send(body))
    }

    /// `PUT /v1/blocks` of one block of `g` on node `id`.
    pub fn put_block(
        &self,
        id: u64,
        g: &kvfabric_store::ModelGeometry,
        payload: &[u8],
        extra: &[(&str, &str)],
    ) -> Reply {
        let tokens = g.block_tokens().to_string();
        let mut headers = vec![
            ("kvfabric-model", g.name.as_str()),
            ("kvfabric-tokens", &tokens),
        ];
        headers.extend_from_slice(extra);
        self.put(id, "/v1/blocks", &headers, payload)
            .unwrap_or_else(|| panic!("n{id} did not answer the put"))
    }

    /// `POST /v1/lookup` of one chunk key on node `id`: its block and owners.
    pub fn lookup(&self, id: u64, key: &str) -> (Option<String>, Vec<String>) {
        let r = self
            .post(id, "/v1/lookup", &serde_json::json!({ "keys": [key] }))
            .expect("lookup answered");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        let res = &v["results"][0];
        let mut owners: Vec<String> = res["owners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().to_owned())
            .collect();
        owners.sort();
        (res["block"].as_str().map(str::to_owned), owners)
    }

    /// Whether node `id` holds a copy of `block` itself: its HEAD answers 200 with
    /// `kvfabric-source: local` (a HEAD answers as a GET would, so a node holding no copy
    /// answers 200 too, naming the owner that does).
    pub fn holds(&self, id: u64, block: &str) -> bool {
        let r = self
            .agent
            .head(format!("{}/v1/blocks/{block}", self.api(id)))
            .call()
            .expect("head answered");
        r.status() == 200
            && r.headers()
                .get("kvfabric-source")
                .is_some_and(|v| v == "local")
    }

    /// The members holding a copy of `block` once a push of it still in flight has landed:
    /// a put answers once r copies are in, and a push hedged on a loaded machine may land
    /// a copy more within its attempt bound (2 s; docs/API.md, "Hedging"). Every member
    /// must be running.
    pub fn settled_holders(&self, block: &str) -> Vec<u64> {
        std::thread::sleep(Duration::from_millis(2_500));
        (1..=self.apis.len() as u64)
            .filter(|n| self.holds(*n, block))
            .collect()
    }

    /// HEAD of a block on node `id`: its status and `kvfabric-source`; `None` without an
    /// answer.
    pub fn get_head(&self, id: u64, block: &str) -> Option<(u16, Option<String>)> {
        let r = self
            .agent
            .head(format!("{}/v1/blocks/{block}", self.api(id)))
            .call()
            .ok()?;
        let source = r
            .headers()
            .get("kvfabric-source")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Some((r.status().as_u16(), source))
    }

    /// HEAD of a block on node `id` (no read, no promotion): its status.
    pub fn head_status(&self, id: u64, block: &str) -> u16 {
        self.head_block(id, block).0
    }

    /// HEAD of a block on node `id`: its status and `kvfabric-tier`.
    pub fn head_block(&self, id: u64, block: &str) -> (u16, Option<String>) {
        let r = self
            .agent
            .head(format!("{}/v1/blocks/{block}", self.api(id)))
            .call()
            .expect("head answered");
        let tier = r
            .headers()
            .get("kvfabric-tier")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (r.status().as_u16(), tier)
    }

    /// POST JSON to `path` on node `id`.
    pub fn post(&self, id: u64, path: &str, body: &serde_json::Value) -> Option<Reply> {
        Self::reply(
            self.agent
                .post(format!("{}{path}", self.api(id)))
                .header("content-type", "application/json")
                .send(serde_json::to_vec(body).unwrap().as_slice()),
        )
    }

    /// Node `id`'s view of the cluster, if it answers.
    pub fn view(&self, id: u64) -> Option<View> {
        let r = self.get(id, "/v1/cluster")?;
        if r.status != 200 {
            return None;
        }
        let v = r.json();
        let members = v["members"].as_array()?;
        Some(View {
            leader: v["leader"].as_str().map(str::to_owned),
            term: v["term"].as_u64()?,
            roles: members
                .iter()
                .map(|m| {
                    (
                        m["id"].as_str().unwrap_or("").to_owned(),
                        m["role"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect(),
            healthy: members
                .iter()
                .map(|m| {
                    (
                        m["id"].as_str().unwrap_or("").to_owned(),
                        m["healthy"].as_bool().unwrap_or(false),
                    )
                })
                .collect(),
            tiers: members
                .iter()
                .map(|m| {
                    let names = m["tiers"]
                        .as_array()
                        .map(|t| {
                            t.iter()
                                .map(|x| x["tier"].as_str().unwrap_or("").to_owned())
                                .collect()
                        })
                        .unwrap_or_default();
                    (m["id"].as_str().unwrap_or("").to_owned(), names)
                })
                .collect(),
        })
    }

    /// One `kvfabric_raft_state{stat=…}` figure of node `id`.
    pub fn raft_stat(&self, id: u64, stat: &str) -> Option<u64> {
        let r = self.get(id, "/metrics")?;
        let text = String::from_utf8_lossy(&r.body).to_string();
        let want = format!("kvfabric_raft_state{{node=\"n{id}\",stat=\"{stat}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&want))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    }

    /// Whether node `id` answers `/readyz` with 200.
    pub fn ready(&self, id: u64) -> bool {
        self.get(id, "/readyz").is_some_and(|r| r.status == 200)
    }

    /// Waits until `f` holds, or panics naming `what` after [`CLUSTER_TIMEOUT`].
    pub fn wait_for<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() > CLUSTER_TIMEOUT {
                let logs: Vec<_> = (1..=self.apis.len() as u64)
                    .map(|i| format!("--- n{i} ---\n{}", tail(&self.log(i), 30)))
                    .collect();
                panic!("timed out waiting for {what}\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until every node in `ids` reports the same known leader at the same term.
    pub fn agreed_leader(&self, ids: &[u64]) -> (String, u64) {
        self.wait_for("one leader agreed by every node", || {
            let views: Vec<View> = ids.iter().map(|i| self.view(*i)).collect::<Option<_>>()?;
            let first = views.first()?;
            let leader = first.leader.clone()?;
            views
                .iter()
                .all(|v| v.leader.as_deref() == Some(leader.as_str()) && v.term == first.term)
                .then_some((leader, first.term))
        })
    }

    /// SIGKILL node `id` and wait until its process is gone.
    pub fn kill(&self, id: u64) {
        self.signal(id, libc::SIGKILL, "SIGKILL");
    }

    /// SIGTERM node `id` (it shuts down: requests drained, its QUIC endpoints closed, so
    /// peers drop their connections to it) and wait until its process is gone.
    pub fn stop(&self, id: u64) {
        self.signal(id, libc::SIGTERM, "SIGTERM");
    }

    /// Sends `sig` to node `id` and waits until its process is gone.
    fn signal(&self, id: u64, sig: libc::c_int, name: &str) {
        let pid = self.pid(id);
        // SAFETY: kill(2) on a pid this cluster started.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "{name} n{id} (pid {pid})");
        self.wait_for(&format!("n{id} gone after {name}"), || {
            (!alive(pid)).then_some(())
        });
    }

    /// Starts node `id` again from its config (its pid file is rewritten for `down`).
    pub fn restart(&mut self, id: u64) {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join(format!("node{id}.log")))
            .expect("log");
        let child = self
            .bin
            .command()
            .arg("node")
            .arg("--config")
            .arg(self.config(id))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("restarting the node");
        std::fs::write(
            self.path().join(format!("node{id}.pid")),
            format!("{}\n", child.id()),
        )
        .expect("pid file");
        self.restarted.push(child);
    }

    /// `kvfabric cluster add`: a new member (the next id) joins as a learner, catches up and
    /// becomes a voter; its id. Panics with the command's output if it fails.
    pub fn add_member(&mut self) -> u64 {
        let out = self.cluster_command("add", &[]);
        let (ok, text) = &out;
        assert!(ok, "cluster add failed:\n{text}");
        let (id, api) = text
            .lines()
            .find_map(|l| {
                let mut parts = l.split_whitespace();
                let (id, api) = (parts.next()?, parts.next()?);
                let n = id.strip_prefix('n')?.parse::<u64>().ok()?;
                (api.starts_with("http://") && parts.next().is_none()).then(|| (n, api.to_owned()))
            })
            .unwrap_or_else(|| panic!("no `nN http://…` line in:\n{text}"));
        if self.apis.len() < id as usize {
            self.apis.resize(id as usize, String::new());
        }
        self.apis[id as usize - 1] = api;
        id
    }

    /// `kvfabric cluster remove --node ID` (drain included): its exit status and output.
    pub fn remove_member(&mut self, id: u64) -> (bool, String) {
        self.cluster_command("remove", &["--node", &id.to_string()])
    }

    fn cluster_command(&self, sub: &str, extra: &[&str]) -> (bool, String) {
        let out = self
            .bin
            .command()
            .args(["cluster", sub, "--dir"])
            .arg(self.path())
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running cluster {sub}: {e}"));
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// `kvfabric cluster down`: its exit status and output.
    pub fn down(&mut self) -> (bool, String) {
        let out = self
            .bin
            .command()
            .args(["cluster", "down", "--dir"])
            .arg(self.path())
            .output()
            .expect("running cluster down");
        for c in &mut self.restarted {
            let _ = c.wait();
        }
        self.restarted.clear();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The logs are copied before `cluster down`, which removes the cluster's folder.
        if std::thread::panicking() {
            // Keep the logs of a failed test for a post-mortem.
            let keep = std::env::temp_dir().join("kvfabric-failed-clusters");
            let _ = std::fs::create_dir_all(&keep);
            for i in 1..=self.apis.len() as u64 {
                let name = format!(
                    "{}-node{i}.log",
                    self.path()
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                );
                let _ = std::fs::copy(self.path().join(format!("node{i}.log")), keep.join(&name));
            }
            eprintln!("logs kept in {}", keep.display());
        }
        let (ok, out) = self.down();
        if !ok {
            eprintln!("cluster down failed on drop: {out}");
        }
    }
}

/// Whether `pid` is a live, non-zombie process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z") | Some("X") | None
        ),
        Err(_) => false,
    }
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<_> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}
