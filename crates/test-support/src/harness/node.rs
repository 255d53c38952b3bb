//! [`TestNode`]: the real `kvfabric` binary started on loopback with a temp data directory,
//! an OS-chosen port (`127.0.0.1:0`, read back from the line the node prints), a small models
//! directory (the tiny MLA preset plus copies of five shipped ones) and, by default, three
//! tenants; its config written through [`crate::config`].
//!
//! Timeouts are generous (a loaded 2-core machine starts processes slowly); nothing here
//! asserts on timing.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvfabric_store::geometry::preset::BUILTIN_PRESET_FILES;
use kvfabric_store::ModelGeometry;

use super::{Kvfabric, Reply};
use crate::config::{
    ArenasSection, Bytes, DiskSection, EventsSection, GpuSection, LimitsSection, ModelsSection,
    NamespaceSection, NodeConfigFile, OperatorSection, TenantSection,
};
use crate::presets::{payload, tiny, TINY_TOML};

/// How long a node may take to print its address and to become ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Per-request timeout of the test client.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Token of tenant `a` (namespace `a`).
pub const TOKEN_A: &str = "token-for-tenant-a";
/// Token of tenant `b` (namespace `b`).
pub const TOKEN_B: &str = "token-for-tenant-b";
/// Token of the writer of the shared namespace `docs`.
pub const TOKEN_DOCS: &str = "token-for-docs-writer";
/// The operator token of [`Options::default`] (`/metrics` of a node with tenants needs it).
pub const TOKEN_OPERATOR: &str = "token-for-the-operator";

/// What a test node's config says beyond the defaults.
#[derive(Clone)]
pub struct Options {
    /// `tiers.host_bytes`.
    pub host_bytes: u64,
    /// `tiers.disk.bytes` (no disk tier if `None`).
    pub disk_bytes: Option<u64>,
    /// `[limits]`.
    pub limits: LimitsSection,
    /// `[events]`, if any.
    pub events: Option<EventsSection>,
    /// Whether to declare tenants (else an open node).
    pub tenants: bool,
    /// `[operator] token`, if any.
    pub operator: Option<String>,
    /// `[arenas]`, if any.
    pub arenas: Option<ArenasSection>,
    /// `[tiers.gpu]`, if any (the node needs the `cuda` feature and a device).
    pub gpu: Option<GpuSection>,
    /// `[node] worker_threads`, if set.
    pub worker_threads: Option<usize>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            host_bytes: 64 << 20,
            disk_bytes: Some(64 << 20),
            limits: LimitsSection::default(),
            events: None,
            tenants: true,
            operator: Some(TOKEN_OPERATOR.into()),
            arenas: None,
            gpu: None,
            worker_threads: None,
        }
    }
}

/// A running node process.
pub struct TestNode {
    /// Its directory: config, models, data, log (removed on drop).
    pub dir: tempfile::TempDir,
    /// Its API address.
    pub url: String,
    /// Its `[operator] token`, if any.
    pub operator: Option<String>,
    bin: Kvfabric,
    child: Option<Child>,
    agent: ureq::Agent,
}

/// The shipped model presets a test node's models directory also holds.
const SHIPPED_MODELS: [&str; 5] = [
    "deepseek-v3.toml",
    "minicpm3-4b.toml",
    "llama-3.1-8b.toml",
    "deepseek-v4-pro.toml",
    "deepseek-v4-flash.toml",
];

impl TestNode {
    /// Writes a config and a models directory into a fresh temp dir and starts a node.
    pub fn start(bin: &Kvfabric, opts: Options) -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        std::fs::create_dir(&models).unwrap();
        std::fs::write(models.join("tiny-mla.toml"), TINY_TOML).unwrap();
        // From the presets embedded in the binary, not the source tree: a test executable
        // carried to another machine (`tools/device-test`) has no checkout beside it.
        for f in SHIPPED_MODELS {
            let (_, text) = BUILTIN_PRESET_FILES
                .iter()
                .find(|(name, _)| *name == f)
                .unwrap_or_else(|| panic!("{f} is not a built-in preset"));
            std::fs::write(models.join(f), text).unwrap();
        }
        std::fs::write(
            dir.path().join("node.toml"),
            config(&opts).to_toml("a test node"),
        )
        .unwrap();
        let mut node = TestNode {
            dir,
            url: String::new(),
            operator: opts.operator.clone(),
            bin: bin.clone(),
            child: None,
            agent: kvfabric_http_client::agent(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(CALL_TIMEOUT))
                    .build(),
            ),
        };
        node.launch();
        node
    }

    /// Its config file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("node.toml")
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("node.log"))
            .unwrap();
        let mut child = self
            .bin
            .command()
            .arg("node")
            .arg("--config")
            .arg(self.config_path())
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

    /// Until `GET /readyz` answers 200; a node that exits first (a config it refuses, a
    /// tier that cannot open) fails the test at once with its log, not at the deadline.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(r) = self.agent.get(format!("{}/readyz", self.url)).call() {
                if r.status() == 200 {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "the node exited ({status}) before it was ready; log:\n{}",
                    self.log()
                );
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
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
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

    /// Its log so far.
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
        Reply::whole(r.send(body).expect("PUT"))
    }

    /// `GET path`.
    pub fn get(&self, token: Option<&str>, path: &str, headers: &[(&str, &str)]) -> Reply {
        let r = self.req(
            self.agent.get(format!("{}{path}", self.url)),
            token,
            headers,
        );
        Reply::whole(r.call().expect("GET"))
    }

    /// `HEAD path`.
    pub fn head(&self, token: Option<&str>, path: &str) -> Reply {
        let r = self.req(self.agent.head(format!("{}{path}", self.url)), token, &[]);
        Reply::whole(r.call().expect("HEAD"))
    }

    /// `DELETE path`.
    pub fn delete(&self, token: Option<&str>, path: &str) -> Reply {
        let r = self.req(self.agent.delete(format!("{}{path}", self.url)), token, &[]);
        Reply::whole(r.call().expect("DELETE"))
    }

    /// `POST path` with a raw body.
    pub fn post(&self, token: Option<&str>, path: &str, body: &[u8]) -> Reply {
        let r = self.req(
            self.agent.post(format!("{}{path}", self.url)),
            token,
            &[("content-type", "application/json")],
        );
        Reply::whole(r.send(body).expect("POST"))
    }

    /// `POST path` with a raw body and exactly these extra headers.
    pub fn post_with(
        &self,
        token: Option<&str>,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let r = self.req(
            self.agent.post(format!("{}{path}", self.url)),
            token,
            headers,
        );
        Reply::whole(r.send(body).expect("POST"))
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
        let text = self.get(self.operator.as_deref(), "/metrics", &[]).text();
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

/// The config of a test node with `o`.
fn config(o: &Options) -> NodeConfigFile {
    let mut c = NodeConfigFile::new(1, "127.0.0.1:0", "data".into(), Bytes::Count(o.host_bytes));
    c.node.log_level = Some("info".into());
    c.node.worker_threads = o.worker_threads;
    c.tiers.disk = o.disk_bytes.map(DiskSection::of);
    c.tiers.gpu = o.gpu.clone();
    c.models = Some(ModelsSection {
        dir: "models".into(),
    });
    c.limits = Some(o.limits.clone());
    c.events = o.events.clone();
    c.operator = o.operator.clone().map(|token| OperatorSection { token });
    c.arenas = o.arenas.clone();
    if o.tenants {
        let ns = |name: &str, shared: bool| NamespaceSection {
            name: name.into(),
            shared,
        };
        c.namespaces = vec![ns("a", false), ns("b", false), ns("docs", true)];
        let tenant = |token: &str, namespace: &str| TenantSection {
            token: token.into(),
            namespace: namespace.into(),
        };
        c.tenants = vec![
            tenant(TOKEN_A, "a"),
            tenant(TOKEN_B, "b"),
            tenant(TOKEN_DOCS, "docs"),
        ];
    }
    c
}
