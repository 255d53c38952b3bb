//! A path that goes dark and comes back: a client's pooled connection to a peer whose packets
//! were all dropped for a few seconds (a partition, a paused process) while exchanges kept
//! being tried on it. quinn doubles the connection's probe timeout with every probe lost, so
//! after a gap of a few seconds that connection stays stalled for up to as long again once
//! the path is back (measured with this relay and quinn's 30 s idle timeout: 0.6–6.5 s after
//! gaps of 3–8 s; with the node's 3 s idle timeout, which the tests use, 0.4–1.0 s after gaps
//! of 1.5–2.8 s and 1.5 s with 1 MB pushes left queued on it); a fresh connection is answered
//! once a dial gets through. `Transport::set_aside` is how the fabric, having seen the peer fall
//! silent, gets the fresh one; `quic.initial_rtt_ms` is how a dial begun in the dark gets
//! through soon after the path is back. Over a UDP relay on this host's network address, so the
//! client takes the path for a network one (MTU discovery, segmentation offload), as nodes in
//! separate hosts or namespaces do.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::QuicFactory;
use kvfabric_store::NamespaceKey;
use kvfabric_store::VerifiedBlock;
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::conformance::TransportFactory;
use kvfabric_transport::{MemorySource, PeerAddr, QuicTransport, Transport, TransportConfig};
use tokio::net::UdpSocket;

/// A UDP relay for one client: what arrives on its front goes to `target`, what comes back
/// goes to the client; while `dark` is set both directions are dropped.
struct Relay {
    addr: SocketAddr,
    dark: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: SocketAddr, ip: std::net::IpAddr) -> Relay {
        let front = UdpSocket::bind(SocketAddr::new(ip, 0))
            .await
            .expect("front");
        let back = UdpSocket::bind("127.0.0.1:0").await.expect("back");
        back.connect(target).await.expect("connect");
        let addr = front.local_addr().expect("addr");
        let dark = Arc::new(AtomicBool::new(false));
        let d = dark.clone();
        let task = tokio::spawn(async move {
            let (mut a, mut b) = (vec![0u8; 65_536], vec![0u8; 65_536]);
            let mut client: Option<SocketAddr> = None;
            loop {
                tokio::select! {
                    r = front.recv_from(&mut a) => {
                        let Ok((n, from)) = r else { return };
                        client = Some(from);
                        if !d.load(Ordering::SeqCst) {
                            let _ = back.send(&a[..n]).await;
                        }
                    }
                    r = back.recv(&mut b) => {
                        let Ok(n) = r else { return };
                        if let (Some(c), false) = (client, d.load(Ordering::SeqCst)) {
                            let _ = front.send_to(&b[..n], c).await;
                        }
                    }
                }
            }
        });
        Relay { addr, dark, task }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The node's default connect, idle and keep-alive bounds (1 s, 3 s, 1 s).
fn gap_config() -> TransportConfig {
    TransportConfig {
        connect_timeout_ms: 1_000,
        idle_timeout_ms: 3_000,
        keep_alive_ms: 1_000,
        ..TransportConfig::default()
    }
}

/// A server with 16 blocks of 300 kB, and a client that reaches it through a relay, both on
/// [`gap_config`].
async fn through_relay() -> (
    QuicTransport,
    QuicTransport,
    Relay,
    PeerAddr,
    Vec<VerifiedBlock>,
) {
    through_relay_with(gap_config()).await
}

/// [`through_relay`] on `config`.
async fn through_relay_with(
    config: TransportConfig,
) -> (
    QuicTransport,
    QuicTransport,
    Relay,
    PeerAddr,
    Vec<VerifiedBlock>,
) {
    let f = QuicFactory::new();
    let source = MemorySource::new();
    let blocks: Vec<_> = (0..16).map(|i| test_block(ns(), 300_000, i + 1)).collect();
    for b in &blocks {
        source.insert(b.clone());
    }
    let server = f
        .build(config.clone(), Arc::new(source))
        .await
        .expect("server");
    let client = f
        .build(config, Arc::new(MemorySource::new()))
        .await
        .expect("client");
    // On this host's network address, so the client takes the path for a network one.
    let ip = common::own_network_address().unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    let relay = Relay::start(server.local_peer().addr, ip).await;
    let peer = PeerAddr::new(server.local_peer().name.clone(), relay.addr);
    (server, client, relay, peer, blocks)
}

fn ns() -> NamespaceKey {
    NamespaceKey::derive("gap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_its_peer_fell_silent_on_is_set_aside_and_the_next_fetch_dials_afresh() {
    let (_server, client, relay, peer, blocks) = through_relay().await;
    client
        .fetch(&peer, ns(), blocks[0].id())
        .await
        .expect("before the gap");
    let opened = client.counters().connections_opened;

    // Dark for 2.5 s (within the node's idle timeout, so the connection outlives it). An attempt begun as it went dark is still unanswered 400 ms later (the
    // node's suspect_ms): the fabric sets the connection aside then. Attempts bounded at 2 s
    // (the node's attempt_ms), a fetch and a push of 1 MB, go on being made every 250 ms, as
    // reads and copies keep coming.
    relay.dark.store(true, Ordering::SeqCst);
    let began = Instant::now();
    let dark_until = began + Duration::from_millis(2_500);
    let mut set_aside = false;
    let mut i = 1;
    while Instant::now() < dark_until {
        let (c, p, id) = (client.clone(), peer.clone(), blocks[i % 16].id());
        let pushed = test_block(ns(), 1_000_000, 100 + i as u64);
        tokio::spawn(async move {
            let bound = Duration::from_secs(2);
            let _ = tokio::time::timeout(bound, c.fetch(&p, ns(), id)).await;
        });
        let (c, p) = (client.clone(), peer.clone());
        tokio::spawn(async move {
            let bound = Duration::from_secs(2);
            let _ = tokio::time::timeout(bound, c.push(&p, &pushed)).await;
        });
        i += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
        if !set_aside && began.elapsed() >= Duration::from_millis(400) {
            client.set_aside(&peer, began);
            set_aside = true;
        }
    }
    relay.dark.store(false, Ordering::SeqCst);

    let t = Instant::now();
    let after = tokio::time::timeout(
        Duration::from_secs(2),
        client.fetch(&peer, ns(), blocks[15].id()),
    )
    .await;
    eprintln!("the first fetch after the gap: {:?}", t.elapsed());
    let got = after
        .expect("answered within one attempt (2 s)")
        .expect("served");
    assert_eq!(got.bytes(), blocks[15].bytes());
    let c = client.counters();
    assert_eq!(c.connections_set_aside, 1, "{c:?}");
    assert!(
        c.connections_opened > opened,
        "served on a new connection: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_answered_since_is_kept() {
    let (_server, client, _relay, peer, blocks) = through_relay().await;
    client
        .fetch(&peer, ns(), blocks[0].id())
        .await
        .expect("first");
    let began = Instant::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    // An exchange begun at `began` is slow, but another one is answered after it began.
    client
        .fetch(&peer, ns(), blocks[1].id())
        .await
        .expect("second");
    client.set_aside(&peer, began);
    client
        .fetch(&peer, ns(), blocks[2].id())
        .await
        .expect("third");
    let c = client.counters();
    assert_eq!(c.connections_set_aside, 0, "{c:?}");
    assert_eq!(c.connections_opened, 1, "one connection throughout: {c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_given_up_in_the_dark_is_not_completed_once_the_path_is_back() {
    let (server, client, relay, peer, blocks) = through_relay().await;
    client
        .fetch(&peer, ns(), blocks[0].id())
        .await
        .expect("connected");

    relay.dark.store(true, Ordering::SeqCst);
    let abandoned = test_block(ns(), 4_000_000, 999);
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), client.push(&peer, &abandoned)).await;
    assert!(gave_up.is_err(), "no answer in the dark");
    tokio::time::sleep(Duration::from_millis(200)).await;
    relay.dark.store(false, Ordering::SeqCst);

    // The path is back: a later exchange on the same connection is answered, and the block
    // whose push was given up is not delivered after all (quinn would finish a dropped stream
    // and send the rest of it first).
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        client.fetch(&peer, ns(), blocks[1].id()),
    )
    .await
    .expect("answered")
    .expect("served");
    assert_eq!(got.bytes(), blocks[1].bytes());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = server.counters();
    assert_eq!(s.pushes_stored, 0, "{s:?}");
    assert_eq!(s.protocol_violations, 0, "{s:?}");
    assert_eq!(client.counters().connections_opened, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dial_begun_in_the_dark_connects_once_the_path_is_back() {
    // No connection yet, and the path is dark: the dial's first Initial is lost. The path
    // comes back 300 ms later, well inside the dial's bound (900 ms here). quinn retransmits
    // an unanswered Initial after its probe timeout, three times the initial RTT estimate
    // before any sample (999 ms at RFC 9002's 333 ms): at that estimate the dial outlives its
    // bound without a second Initial, and the fetch waiting on it fails with a connect error
    // though the path has been back for 600 ms. At the transport's estimate the Initial is
    // sent again at 3, 9, 21, 45 × `initial_rtt_ms`, one of them after the heal.
    let (_server, client, relay, peer, blocks) = through_relay_with(TransportConfig {
        connect_timeout_ms: 900,
        ..gap_config()
    })
    .await;
    relay.dark.store(true, Ordering::SeqCst);
    let (c, p, id) = (client.clone(), peer.clone(), blocks[3].id());
    let began = Instant::now();
    let fetch = tokio::spawn(async move { c.fetch(&p, ns(), id).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.dark.store(false, Ordering::SeqCst);
    let got = fetch.await.expect("task");
    eprintln!(
        "a fetch whose dial began in the dark: {:?}",
        began.elapsed()
    );
    let got = got.expect("served on the dial begun in the dark");
    assert_eq!(got.bytes(), blocks[3].bytes());
    assert_eq!(client.counters().connections_opened, 1);
}
