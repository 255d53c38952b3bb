//! The servers `kvfabric bench node` measures: the baseline and a standalone node (processes
//! of this binary started here: `kvfabric bench node-baseline`, and `kvfabric node` with a host
//! tier and nothing else) and a 3-node cluster with replication 2 (`kvfabric cluster up`, the
//! same code as the command), each stopped again however the run ends.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kvfabric_test_support::config::{Bytes, GpuSection, NodeConfigFile};
use kvfabric_tools::demo;

/// Longest a node may take to print its address and be ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A server process started here (a standalone node, or the baseline); stopped (SIGTERM, then
/// SIGKILL) when dropped.
pub(crate) struct Server {
    /// `http://IP:PORT`.
    pub(crate) url: String,
    child: Child,
}

impl Server {
    /// Writes a config under `dir` (host tier of `host_bytes`, a GPU tier of `gpu_bytes` if
    /// given (puts and hits placed on the device), no disk tier, the embedded model presets,
    /// no tenants) and starts `kvfabric node` on it.
    pub(crate) fn standalone(
        dir: &Path,
        host_bytes: u64,
        gpu_bytes: Option<u64>,
    ) -> anyhow::Result<Server> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("node.toml");
        let mut c =
            NodeConfigFile::new(1, "127.0.0.1:0", dir.join("data"), Bytes::Count(host_bytes));
        c.tiers.gpu = gpu_bytes.map(|bytes| GpuSection {
            bytes: Bytes::Count(bytes),
            ordinal: None,
            puts: Some(true),
            promote: Some(true),
        });
        std::fs::write(&config, c.to_toml("kvfabric bench node: a standalone node"))
            .with_context(|| format!("writing {}", config.display()))?;
        let args = ["node".into(), "--config".into(), config.into_os_string()];
        Server::start(&args, &dir.join("node.log"))
    }

    /// Starts `kvfabric bench node-baseline --bytes LEN`, logging under `dir`.
    pub(crate) fn baseline(dir: &Path, len: usize) -> anyhow::Result<Server> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let args = [
            "bench".into(),
            "node-baseline".into(),
            "--bytes".into(),
            len.to_string().into(),
        ];
        Server::start(&args, &dir.join("baseline.log"))
    }

    /// Runs this binary with `args`, reads `listening on URL` from its stdout and waits until
    /// `GET /readyz` (the node) or `GET /received` (the baseline) answers 200.
    fn start(args: &[OsString], log_path: &Path) -> anyhow::Result<Server> {
        let log = std::fs::File::create(log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let exe = std::env::current_exe().context("finding the kvfabric binary")?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting kvfabric {args:?}"))?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let mut server = Server {
            url: String::new(),
            child,
        };
        server.url = match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => url,
            Err(_) => bail!(
                "kvfabric {args:?} printed no address within {} s; see {}",
                START_TIMEOUT.as_secs(),
                log_path.display()
            ),
        };
        let probe = if args[0] == "node" {
            "readyz"
        } else {
            "received"
        };
        wait_ready(&server.url, probe, &mut server.child).with_context(|| {
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let last = lines[lines.len().saturating_sub(3)..].join(" / ");
            format!("kvfabric {args:?}; the end of its log: {last}")
        })?;
        Ok(server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child we have not reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local 3-node cluster with replication 2; `cluster down` when dropped.
pub(crate) struct Cluster {
    dir: PathBuf,
    /// Each node's `http://IP:PORT`.
    pub(crate) urls: Vec<String>,
}

impl Cluster {
    /// `cluster up --nodes 3 --replication 2` in `dir`, each node with `host_bytes` of host
    /// RAM.
    pub(crate) fn start(dir: &Path, host_bytes: u64) -> anyhow::Result<Cluster> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut c = Cluster {
            dir: dir.to_path_buf(),
            urls: Vec::new(),
        };
        demo::cluster_up(dir, host_bytes.div_ceil(1 << 20), "120")?;
        c.urls = demo::node_urls(dir)?;
        Ok(c)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let down = demo::cluster_command(&self.dir, "down", &["--grace-s", "10"])
            .and_then(|()| demo::none_running(&self.dir));
        if let Err(e) = down {
            eprintln!("bench node: stopping the cluster: {e:#}");
        }
    }
}

/// Polls `GET /{probe}` until it answers 200; a server that exits first is an error at once.
fn wait_ready(url: &str, probe: &str, child: &mut Child) -> anyhow::Result<()> {
    let agent: ureq::Agent = kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
    );
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(r) = agent.get(format!("{url}/{probe}")).call() {
            if r.status() == 200 {
                return Ok(());
            }
        }
        if let Some(status) = child.try_wait().context("polling the server")? {
            bail!("{url} exited ({status}) before it was ready");
        }
        if Instant::now() > deadline {
            bail!("{url} not ready within {} s", START_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
