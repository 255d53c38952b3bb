//! Router test harness: `kvfabric engine-sim` and `kvfabric router` as real processes on
//! loopback (port 0, the address read back from the line they print), killed on drop, and a
//! small JSON client.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kvfabric_store::{chunk_keys, ChunkMode, ModelGeometry, NamespaceKey};

/// How long a server may take to print its address.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Per-request timeout.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `kvfabric engine-sim` or `kvfabric router`.
pub struct Server {
    child: Child,
    pub url: String,
    agent: ureq::Agent,
}

/// A JSON reply.
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "expected JSON ({e}), found {:?} (status {})",
                String::from_utf8_lossy(&self.body),
                self.status
            )
        })
    }

    /// Asserts a JSON error with `status` and `code`.
    pub fn assert_error(&self, status: u16, code: &str) {
        let v = self.json();
        assert_eq!(self.status, status, "{v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
}

impl Server {
    /// `kvfabric <args> --listen 127.0.0.1:0`.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kvfabric"))
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("RUST_LOG")
            .env_remove("KVFABRIC_NODE")
            .env_remove("KVFABRIC_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning kvfabric");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(url);
                }
            }
        });
        let url = match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("kvfabric {args:?} printed no address");
            }
        };
        Server {
            child,
            url,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(CALL_TIMEOUT))
                .build()
                .into(),
        }
    }

    fn reply(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Reply {
        let mut resp = resp.expect("request");
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_vec()
            .unwrap();
        Reply { status, body }
    }

    /// `POST path` with a raw body.
    pub fn post_raw(&self, path: &str, body: &[u8]) -> Reply {
        Self::reply(
            self.agent
                .post(format!("{}{path}", self.url))
                .header("content-type", "application/json")
                .send(body),
        )
    }

    /// `POST path` with JSON.
    pub fn post(&self, path: &str, body: &serde_json::Value) -> Reply {
        self.post_raw(path, &serde_json::to_vec(body).unwrap())
    }

    /// `PUT path` with JSON.
    pub fn put(&self, path: &str, body: &serde_json::Value) -> Reply {
        Self::reply(
            self.agent
                .put(format!("{}{path}", self.url))
                .header("content-type", "application/json")
                .send(serde_json::to_vec(body).unwrap().as_slice()),
        )
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Reply {
        Self::reply(self.agent.get(format!("{}{path}", self.url)).call())
    }

    /// `POST /v1/generate` of `tokens`; panics unless 200.
    pub fn generate(&self, tokens: &[u32], mode: Option<&str>) -> serde_json::Value {
        let mut body = serde_json::json!({ "tokens": tokens, "request_id": "t" });
        if let Some(m) = mode {
            body["mode"] = serde_json::json!(m);
        }
        let r = self.post("/v1/generate", &body);
        let v = r.json();
        assert_eq!(r.status, 200, "{v}");
        v
    }

    /// The value of one series in `GET /metrics` (exact series text before the value).
    pub fn metric(&self, series: &str) -> f64 {
        let text = String::from_utf8(self.get("/metrics").body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` chunks of distinct deterministic tokens from `seed`.
pub fn chunks(seed: u32, n: usize, block: usize) -> Vec<u32> {
    (0..(n * block) as u32)
        .map(|i| seed.wrapping_mul(1_000_003).wrapping_add(i) % 100_000)
        .collect()
}

/// The open namespace's chunk keys of `tokens` in `mode`, as hex.
pub fn keys(g: &ModelGeometry, mode: ChunkMode, tokens: &[u32]) -> Vec<String> {
    chunk_keys(&NamespaceKey::derive("default"), g, mode, tokens)
        .iter()
        .map(|k| k.to_hex())
        .collect()
}

/// A loopback URL where nothing listens.
pub fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}
