//! Test harness: the real `kvfabric` binary started on loopback with a temp data directory,
//! an OS-chosen port (`127.0.0.1:0`, read back from the line the node prints), and a small
//! models directory (a tiny MLA preset plus copies of two built-in ones).
//!
//! Timeouts are generous (a loaded 2-core machine starts processes slowly); nothing here
//! asserts on timing.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvfabric_store::ModelGeometry;
use ureq::http::Response;

/// How long a node may take to print its address and to become ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Per-request timeout of the test client.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Tokens of the test tenancy.
pub const TOKEN_A: &str = "token-for-tenant-a";
pub const TOKEN_B: &str = "token-for-tenant-b";
pub const TOKEN_DOCS: &str = "token-for-docs-writer";

/// A small MLA preset: 2 layers × 64 tokens × (16 + 8) dims × 2 B = 6144 payload bytes.
pub const TINY: &str = r#"
[model]
name = "tiny-mla"
kind = "mla"
layers = 2
query_heads = 4
[mla]
kv_lora_rank = 16
rope_dim = 8
mha_head_dim = 16
[precision]
c_kv = "bf16"
k_rope = "bf16"
[rope]
convention = "interleaved"
theta = 10000.0
"#;

/// The tiny geometry, parsed by the store as the node parses it.
pub fn tiny() -> ModelGeometry {
    ModelGeometry::from_toml("<test>/tiny-mla.toml", TINY).unwrap()
}

/// A built-in preset, as the node's models directory holds it.
pub fn builtin(name: &str) -> ModelGeometry {
    kvfabric_store::geometry::preset::builtin_preset(name).unwrap()
}

/// Deterministic bytes that decode to finite bf16 values in [-4, 4).
pub fn payload(g: &ModelGeometry, seed: u64) -> Vec<u8> {
    let len = g.block_layout().payload_len as usize;
    let mut out = Vec::with_capacity(len);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = ((x >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
        out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// What a test node's config says beyond the defaults.
#[derive(Clone)]
pub struct Options {
    /// `tiers.host_bytes`.
    pub host_bytes: u64,
    /// `tiers.disk.bytes` (no disk tier if `None`).
    pub disk_bytes: Option<u64>,
    /// Extra `[limits]` lines.
    pub limits: String,
    /// Whether to declare tenants (else an open node).
    pub tenants: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            host_bytes: 64 << 20,
            disk_bytes: Some(64 << 20),
            limits: String::new(),
            tenants: true,
        }
    }
}

/// A running node process.
pub struct TestNode {
    pub dir: tempfile::TempDir,
    pub url: String,
    child: Option<Child>,
    agent: ureq::Agent,
}

impl TestNode {
    /// Writes a config and a models directory into a fresh temp dir and starts a node.
    pub fn start(opts: Options) -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        std::fs::create_dir(&models).unwrap();
        std::fs::write(models.join("tiny-mla.toml"), TINY).unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/models");
        for f in ["deepseek-v3.toml", "minicpm3-4b.toml", "llama-3.1-8b.toml"] {
            std::fs::copy(shipped.join(f), models.join(f)).unwrap();
        }
        std::fs::write(dir.path().join("node.toml"), config_text(&opts)).unwrap();
        let mut node = TestNode {
            dir,
            url: String::new(),
            child: None,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(CALL_TIMEOUT))
                .build()
                .into(),
        };
        node.launch();
        node
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("node.toml")
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("node.log"))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kvfabric"))
            .arg("node")
            .arg("--config")
            .arg(self.config_path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawning kvfabric");
        let stdout = child.stdout.take().unwrap();
        self.child = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        self.url = match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => url,
            Err(_) => panic!("the node printed no address; log:\n{}", self.log()),
        };
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(r) = self.agent.get(format!("{}/readyz", self.url)).call() {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "not ready in time; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, no shutdown of any kind.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, then the exit status (bounded wait).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = c.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                c.kill().unwrap();
                panic!("the node did not stop on SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the node again on the same config and data directory (a new port).
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default()
    }

    fn req<B>(
        &self,
        mut r: ureq::RequestBuilder<B>,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> ureq::RequestBuilder<B> {
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r
    }

    /// `PUT /v1/blocks` of `model` (its block tokens) with extra headers.
    pub fn put(
        &self,
        token: Option<&str>,
        g: &ModelGeometry,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> Reply {
        let tokens = g.block_tokens().to_string();
        let mut headers = vec![
            ("kvfabric-model", g.name.as_str()),
            ("kvfabric-tokens", &tokens),
        ];
        headers.extend_from_slice(extra);
        self.put_raw(token, &headers, body)
    }

    /// `PUT /v1/blocks` with exactly these headers.
    pub fn put_raw(&self, token: Option<&str>, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let r = self.req(
            self.agent.put(format!("{}/v1/blocks", self.url)),
            token,
            headers,
        );
        Reply::from(r.send(body).expect("PUT"))
    }

    /// `GET path`.
    pub fn get(&self, token: Option<&str>, path: &str, headers: &[(&str, &str)]) -> Reply {
        let r = self.req(
            self.agent.get(format!("{}{path}", self.url)),
            token,
            headers,
        );
        Reply::from(r.call().expect("GET"))
    }

    /// `HEAD path`.
    pub fn head(&self, token: Option<&str>, path: &str) -> Reply {
        let r = self.req(self.agent.head(format!("{}{path}", self.url)), token, &[]);
        Reply::from(r.call().expect("HEAD"))
    }

    /// `DELETE path`.
    pub fn delete(&self, token: Option<&str>, path: &str) -> Reply {
        let r = self.req(self.agent.delete(format!("{}{path}", self.url)), token, &[]);
        Reply::from(r.call().expect("DELETE"))
    }

    /// `POST path` with a raw body.
    pub fn post(&self, token: Option<&str>, path: &str, body: &[u8]) -> Reply {
        let r = self.req(
            self.agent.post(format!("{}{path}", self.url)),
            token,
            &[("content-type", "application/json")],
        );
        Reply::from(r.send(body).expect("POST"))
    }

    /// Sends `head` (request line and headers, no body) on a fresh connection and reads the
    /// whole answer; for requests a well-behaved client would not send.
    pub fn raw(&self, head: &str) -> String {
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(CALL_TIMEOUT)).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// The value of one metric series (exact name with labels), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        let text = self.get(None, "/metrics", &[]).text();
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    }

    /// Asserts the node still serves: ready, and a fresh tiny put works.
    pub fn assert_serving(&self, seed: u64) {
        assert_eq!(self.get(None, "/readyz", &[]).status, 200);
        let g = tiny();
        let r = self.put(Some(TOKEN_A), &g, &payload(&g, seed), &[]);
        assert_eq!(r.status, 201, "{}", r.text());
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- node log (last lines) ---");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

fn config_text(o: &Options) -> String {
    let mut s = format!(
        "[node]\nid = 1\nhttp_listen = \"127.0.0.1:0\"\ndata_dir = \"data\"\nlog_level = \"info\"\n\n\
         [tiers]\nhost_bytes = {}\n",
        o.host_bytes
    );
    if let Some(d) = o.disk_bytes {
        s += &format!("[tiers.disk]\nbytes = {d}\n");
    }
    s += "\n[models]\ndir = \"models\"\n";
    if !o.limits.is_empty() {
        s += &format!("\n[limits]\n{}\n", o.limits);
    }
    if o.tenants {
        s += &format!(
            "\n[[namespaces]]\nname = \"a\"\n[[namespaces]]\nname = \"b\"\n\
             [[namespaces]]\nname = \"docs\"\nshared = true\n\
             [[tenants]]\ntoken = \"{TOKEN_A}\"\nnamespace = \"a\"\n\
             [[tenants]]\ntoken = \"{TOKEN_B}\"\nnamespace = \"b\"\n\
             [[tenants]]\ntoken = \"{TOKEN_DOCS}\"\nnamespace = \"docs\"\n"
        );
    }
    s
}

/// An answer, read whole.
pub struct Reply {
    pub status: u16,
    pub headers: ureq::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    fn from(mut r: Response<ureq::Body>) -> Reply {
        let body = r
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .unwrap_or_default();
        Reply {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a JSON error with this status and code; returns the message.
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{}",
            self.text()
        );
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "{}", self.text());
        v["error"]["message"].as_str().unwrap().to_owned()
    }

    /// The block id of a 201 put answer.
    pub fn block(&self) -> String {
        assert_eq!(self.status, 201, "{}", self.text());
        self.json()["block"].as_str().unwrap().to_owned()
    }
}
