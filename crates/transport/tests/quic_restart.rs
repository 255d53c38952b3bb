//! A peer that is killed and restarts at the same address: the pooled connection to its
//! previous process is reset by the new one (the stateless-reset key and the connection ids'
//! key are derived from the node's private key), and the fetch goes on over a fresh
//! connection instead of waiting out the idle timeout.
//!
//! The serving node is a real child process (this test binary, re-run as [`serve`]), killed
//! with SIGKILL: no close frame, as a crashed node.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use common::loopback;
use kvfabric_store::{NamespaceKey, VerifiedBlock};
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::conformance::suite_config;
use kvfabric_transport::{
    generate_cluster, MemorySource, NodeIdentity, PeerAddr, QuicTransport, Transport,
    TransportConfig,
};

/// Set in the child: the certificates' folder and the address to bind.
const CERTS_ENV: &str = "KVFABRIC_TEST_RESTART_CERTS";
const LISTEN_ENV: &str = "KVFABRIC_TEST_RESTART_LISTEN";

fn ns() -> NamespaceKey {
    NamespaceKey::derive("restart")
}

fn block() -> VerifiedBlock {
    test_block(ns(), 300_000, 7)
}

/// Long bounds: a fetch on a connection nobody resets fails with a timeout after 10 s, long
/// before the 60 s idle timeout would close it, and no keep-alive (30 s) notices the restart
/// before the fetch does.
fn config() -> TransportConfig {
    TransportConfig {
        fetch_timeout_ms: 10_000,
        idle_timeout_ms: 60_000,
        keep_alive_ms: 30_000,
        ..suite_config()
    }
}

/// The child: node1 serving [`block`] until killed, its address on stdout.
#[test]
#[ignore = "the serving child process of the restart test, run by it"]
fn serve() {
    let (Ok(certs), Ok(listen)) = (std::env::var(CERTS_ENV), std::env::var(LISTEN_ENV)) else {
        return;
    };
    let identity = NodeIdentity::load_from_dir(Path::new(&certs), "node1").expect("identity");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let source = MemorySource::new();
        source.insert(block());
        let t = QuicTransport::bind(
            config(),
            &identity,
            listen.parse().expect("address"),
            Arc::new(source),
        )
        .await
        .expect("bind");
        println!("listening {}", t.local_addr());
        std::future::pending::<()>().await;
    });
}

/// The child process, killed (SIGKILL) and reaped when dropped, a failed test included.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// node1 in a child process on `listen`, started and bound (its address read back).
fn start(certs: &Path, listen: SocketAddr) -> (Node, SocketAddr) {
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "serve",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CERTS_ENV, certs)
        .env(LISTEN_ENV, listen.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("child");
    // Owned by the guard from here on, so a failure below kills and reaps it.
    let mut node = Node(child);
    let stdout = node.0.stdout.take().expect("stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child output");
        // libtest's "test serve ... " may precede it on the line.
        if let Some((_, addr)) = line.split_once("listening ") {
            return (node, addr.parse().expect("address"));
        }
    }
    panic!("the child ended before it listened");
}

#[test]
fn a_fetch_after_the_peer_restarted_reaches_the_new_process_over_a_fresh_connection() {
    let certs = tempfile::tempdir().expect("tempdir");
    generate_cluster(certs.path(), 2).expect("certificates");
    let (first, at) = start(certs.path(), loopback());

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt
        .block_on(QuicTransport::bind(
            config(),
            &NodeIdentity::load_from_dir(certs.path(), "node2").expect("identity"),
            loopback(),
            Arc::new(MemorySource::new()),
        ))
        .expect("client");
    let peer = PeerAddr::new("node1", at);
    let want = block();
    let got = rt
        .block_on(client.fetch(&peer, ns(), want.id()))
        .expect("the first process serves");
    assert_eq!(got.bytes(), want.bytes());
    assert_eq!(client.counters().connections_opened, 1);

    drop(first);
    let (second, again) = start(certs.path(), at);
    assert_eq!(again, at);
    let got = rt
        .block_on(client.fetch(&peer, ns(), want.id()))
        .expect("the new process serves: the stale connection was reset, not waited out");
    drop(second);
    assert_eq!(got.id(), want.id());
    assert_eq!(got.bytes(), want.bytes());
    let c = client.counters();
    // The reset lands on the fetch's own request (one redial) or, when another packet of the
    // old connection reached the new process first, before it (the pool dials afresh).
    assert!(c.redials <= 1, "{c:?}");
    assert_eq!(c.connections_opened, 2, "{c:?}");
    assert_eq!(
        (c.fetches_ok, c.fetches_failed, c.timeouts),
        (2, 0, 0),
        "{c:?}"
    );
}
