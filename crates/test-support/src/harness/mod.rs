//! The process harness of real-process tests: the `kvfabric` binary under test
//! ([`Kvfabric`]), one node of it ([`node::TestNode`]), a `cluster up` cluster of it
//! ([`cluster::Cluster`]), their answers ([`Reply`]) and the processes seen through `/proc`
//! ([`procs`]).

pub mod cluster;
pub mod node;
pub mod procs;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `kvfabric` binary a test runs (in the node crate's tests:
/// `Kvfabric::at(env!("CARGO_BIN_EXE_kvfabric"))`).
#[derive(Debug, Clone)]
pub struct Kvfabric {
    path: PathBuf,
}

impl Kvfabric {
    /// The binary at `path`.
    pub fn at(path: impl AsRef<Path>) -> Kvfabric {
        Kvfabric {
            path: path.as_ref().to_path_buf(),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A command running it, with `RUST_LOG` removed (the config's level applies).
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.path);
        c.env_remove("RUST_LOG");
        c
    }

    /// `node --config` with `config` (TOML, relative paths under a fresh temp directory) run
    /// to its exit, for a node expected to refuse to start: its exit code and standard error.
    pub fn node_exit(&self, config: &str) -> (Option<i32>, String) {
        let dir = tempfile::tempdir().expect("a temp directory");
        let path = dir.path().join("node.toml");
        std::fs::write(&path, config).expect("writing the config");
        let out = self
            .command()
            .args(["node", "--config"])
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("running the node");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// One node of it ([`node::TestNode::start`]).
    pub fn node(&self, opts: node::Options) -> node::TestNode {
        node::TestNode::start(self, opts)
    }

    /// `cluster up --nodes N` of it ([`cluster::Cluster::up`]).
    pub fn cluster(&self, nodes: u32) -> cluster::Cluster {
        cluster::Cluster::up(self, nodes, &[])
    }

    /// `cluster up --nodes N` with extra arguments.
    pub fn cluster_with(&self, nodes: u32, extra: &[&str]) -> cluster::Cluster {
        cluster::Cluster::up(self, nodes, extra)
    }
}

/// Logs the test's phases (`tracing::info!`) to the test's output.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("info")
        .try_init();
}

/// An HTTP answer, read whole.
pub struct Reply {
    /// Its status.
    pub status: u16,
    /// Its headers.
    pub headers: ureq::http::HeaderMap,
    /// Its body.
    pub body: Vec<u8>,
}

/// Largest answer body read.
const REPLY_BYTES_MAX: u64 = 64 << 20;

impl Reply {
    /// Reads `r` whole; `None` if its body could not be read.
    pub fn read(mut r: ureq::http::Response<ureq::Body>) -> Option<Reply> {
        let body = r
            .body_mut()
            .with_config()
            .limit(REPLY_BYTES_MAX)
            .read_to_vec()
            .ok()?;
        Some(Reply {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body,
        })
    }

    /// Reads `r` whole; an unreadable body is empty.
    pub fn whole(r: ureq::http::Response<ureq::Body>) -> Reply {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        Reply::read(r).unwrap_or(Reply {
            status,
            headers,
            body: Vec::new(),
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics, quoting it, when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("expected JSON ({e}), found {:?}", self.text()))
    }

    /// A header's value.
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
