//! The fault-injecting UDP relay: every node-to-node packet (block transport and Raft, both
//! QUIC) passes through it, so the harness can drop, lose and delay traffic in user space
//! (this kernel has no `tc netem`, and on loopback there is no firewall to partition with).
//!
//! One relay listens on each node's *advertised* address and forwards to the node's real
//! listen address. The sender is recognised by the source IP of its packets (node `i` listens
//! on `SRC_NET.i`), so rules are per directed pair `(from, to)`. Each client flow gets its own
//! upstream socket, so the node sees one stable peer per flow and replies come back the same
//! way. Constant delay keeps packet order (a FIFO per direction).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::rng::Rng;

/// What the relays do to traffic right now (shared by all relays of a run).
#[derive(Debug, Default, Clone)]
pub struct Rules {
    /// Directed pairs `(from, to)` whose packets are dropped.
    pub blocked: HashSet<(u64, u64)>,
    /// Probability of losing any packet.
    pub loss: f64,
    /// Added one-way delay.
    pub delay: Duration,
}

impl Rules {
    /// Blocks both directions between every node of `a` and every node of `b`.
    pub fn split(&mut self, a: &[u64], b: &[u64]) {
        for &x in a {
            for &y in b {
                self.blocked.insert((x, y));
                self.blocked.insert((y, x));
            }
        }
    }
}

/// Packet counters of all relays.
#[derive(Debug, Default)]
pub struct RelayCounters {
    /// Packets forwarded.
    pub forwarded: AtomicU64,
    /// Packets dropped by a partition.
    pub blocked: AtomicU64,
    /// Packets lost on purpose.
    pub lost: AtomicU64,
}

/// Installs partitions and loss outside the relay (nftables in the nodes' namespaces).
pub type Firewall = Arc<dyn Fn(&Rules) -> anyhow::Result<()> + Send + Sync>;

/// Names the node a source address belongs to.
pub type NodeOf = Arc<dyn Fn(IpAddr) -> Option<u64> + Send + Sync>;

/// Shared state of a run's relays.
#[derive(Clone)]
pub struct Net {
    /// The rules the relays apply.
    pub rules: Arc<Mutex<Rules>>,
    /// The counters.
    pub counters: Arc<RelayCounters>,
    stop: Arc<AtomicBool>,
    firewall: Option<Firewall>,
}

impl Default for Net {
    fn default() -> Net {
        Net {
            rules: Arc::new(Mutex::new(Rules::default())),
            counters: Arc::new(RelayCounters::default()),
            stop: Arc::new(AtomicBool::new(false)),
            firewall: None,
        }
    }
}

impl Net {
    /// Relays that leave partitions and loss to `firewall` and only delay.
    pub fn with_firewall(firewall: Firewall) -> Net {
        Net {
            firewall: Some(firewall),
            ..Net::default()
        }
    }

    /// Replaces the rules (with a firewall: it gets the partitions and loss, the relays keep
    /// the delay). A firewall that fails is reported on stderr, and the relays drop instead.
    pub fn set(&self, mut rules: Rules) {
        if let Some(fw) = &self.firewall {
            match fw(&rules) {
                Ok(()) => {
                    rules.blocked.clear();
                    rules.loss = 0.0;
                }
                Err(e) => eprintln!("kvfabric-chaos: nftables: {e:#}; the relays drop instead"),
            }
        }
        *self.rules.lock().unwrap_or_else(|p| p.into_inner()) = rules;
    }

    /// Clears every rule (heals the network).
    pub fn heal(&self) {
        self.set(Rules::default());
    }

    fn verdict(&self, from: Option<u64>, to: u64, rng: &mut Rng) -> Result<Duration, ()> {
        let r = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = from {
            if r.blocked.contains(&(f, to)) {
                self.counters.blocked.fetch_add(1, Ordering::Relaxed);
                return Err(());
            }
        }
        if r.loss > 0.0 && rng.chance(r.loss) {
            self.counters.lost.fetch_add(1, Ordering::Relaxed);
            return Err(());
        }
        Ok(r.delay)
    }

    /// Stops every relay thread (they notice within their poll interval).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// How long a relay socket blocks before checking whether to stop.
const POLL: Duration = Duration::from_millis(100);
/// Largest datagram relayed.
const DATAGRAM_MAX: usize = 65_536;

/// A packet waiting out its delay.
struct Delayed {
    due: Instant,
    bytes: Vec<u8>,
    sock: Arc<UdpSocket>,
    to: SocketAddr,
}

/// Sends packets in order once due (one per direction of a relay).
fn delay_line(stop: Arc<AtomicBool>) -> (mpsc::Sender<Delayed>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel::<Delayed>();
    let h = std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let Ok(p) = rx.recv_timeout(POLL) else {
                continue;
            };
            let now = Instant::now();
            if p.due > now {
                std::thread::sleep(p.due - now);
            }
            let _ = p.sock.send_to(&p.bytes, p.to);
        }
    });
    (tx, h)
}

fn send(
    line: &mpsc::Sender<Delayed>,
    sock: &Arc<UdpSocket>,
    bytes: &[u8],
    to: SocketAddr,
    delay: Duration,
) {
    if delay.is_zero() {
        let _ = sock.send_to(bytes, to);
    } else {
        let _ = line.send(Delayed {
            due: Instant::now() + delay,
            bytes: bytes.to_vec(),
            sock: sock.clone(),
            to,
        });
    }
}

/// One relay: node `node`'s advertised address → its real listen address.
pub struct Relay {
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Binds `advertised` and forwards to `target`; `node_of` names the node a source IP
    /// belongs to; `upstream` is the address a sender's flows leave from.
    pub fn start(
        net: &Net,
        node: u64,
        advertised: SocketAddr,
        target: SocketAddr,
        node_of: NodeOf,
        upstream: Arc<dyn Fn(Option<u64>) -> IpAddr + Send + Sync>,
        seed: u64,
    ) -> std::io::Result<Relay> {
        let front = Arc::new(UdpSocket::bind(advertised)?);
        front.set_read_timeout(Some(POLL))?;
        let net = net.clone();
        let (to_node, h1) = delay_line(net.stop.clone());
        let (to_client, h2) = delay_line(net.stop.clone());
        let main = std::thread::spawn(move || {
            let mut rng = Rng::new(seed);
            let mut flows: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut back: Vec<JoinHandle<()>> = Vec::new();
            let mut buf = vec![0u8; DATAGRAM_MAX];
            while !net.stop.load(Ordering::SeqCst) {
                let Ok((n, client)) = front.recv_from(&mut buf) else {
                    continue;
                };
                let from = node_of(client.ip());
                let Ok(delay) = net.verdict(from, node, &mut rng) else {
                    continue;
                };
                let up = match flows.get(&client) {
                    Some(u) => u.clone(),
                    None => {
                        let Ok(u) = UdpSocket::bind(SocketAddr::new(upstream(from), 0)) else {
                            continue;
                        };
                        let _ = u.set_read_timeout(Some(POLL));
                        let u = Arc::new(u);
                        flows.insert(client, u.clone());
                        back.push(reply_path(
                            &net,
                            u.clone(),
                            front.clone(),
                            client,
                            node,
                            from,
                            to_client.clone(),
                            rng.fork(back.len() as u64),
                        ));
                        u
                    }
                };
                net.counters.forwarded.fetch_add(1, Ordering::Relaxed);
                send(&to_node, &up, &buf[..n], target, delay);
            }
            for b in back {
                let _ = b.join();
            }
        });
        Ok(Relay {
            threads: vec![main, h1, h2],
        })
    }

    /// Waits for the relay's threads (after [`Net::stop`]).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Replies of one flow: node → relay upstream socket → back to the client from the front.
#[allow(clippy::too_many_arguments)]
fn reply_path(
    net: &Net,
    up: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    client: SocketAddr,
    node: u64,
    client_node: Option<u64>,
    line: mpsc::Sender<Delayed>,
    mut rng: Rng,
) -> JoinHandle<()> {
    let net = net.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; DATAGRAM_MAX];
        while !net.stop.load(Ordering::SeqCst) {
            let Ok((n, _)) = up.recv_from(&mut buf) else {
                continue;
            };
            let Some(dst) = client_node else {
                let _ = front.send_to(&buf[..n], client);
                continue;
            };
            let Ok(delay) = net.verdict(Some(node), dst, &mut rng) else {
                continue;
            };
            net.counters.forwarded.fetch_add(1, Ordering::Relaxed);
            send(&line, &front, &buf[..n], client, delay);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_of(ip: IpAddr) -> Option<u64> {
        match ip {
            IpAddr::V4(v) if v.octets()[..3] == [127, 0, 2] => Some(u64::from(v.octets()[3])),
            _ => None,
        }
    }

    fn echo(addr: &str) -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
        let s = UdpSocket::bind(addr).unwrap();
        s.set_read_timeout(Some(POLL)).unwrap();
        let a = s.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let h = std::thread::spawn(move || {
            let mut b = [0u8; 1500];
            while !st.load(Ordering::SeqCst) {
                if let Ok((n, from)) = s.recv_from(&mut b) {
                    let _ = s.send_to(&b[..n], from);
                }
            }
        });
        (a, stop, h)
    }

    fn roundtrip(c: &UdpSocket, to: SocketAddr, msg: &[u8]) -> Option<Vec<u8>> {
        c.send_to(msg, to).unwrap();
        let mut b = [0u8; 1500];
        c.recv_from(&mut b).ok().map(|(n, _)| b[..n].to_vec())
    }

    #[test]
    fn forwards_blocks_and_delays_by_rule() {
        let (target, stop_echo, eh) = echo("127.0.2.2:0");
        let net = Net::default();
        let front: SocketAddr = {
            let s = UdpSocket::bind("127.0.1.2:0").unwrap();
            s.local_addr().unwrap()
        };
        let relay = Relay::start(
            &net,
            2,
            front,
            target,
            Arc::new(node_of),
            Arc::new(move |_| target.ip()),
            1,
        )
        .unwrap();
        let c = UdpSocket::bind("127.0.2.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(
            roundtrip(&c, front, b"hello").as_deref(),
            Some(&b"hello"[..])
        );

        let mut r = Rules::default();
        r.split(&[1], &[2]);
        net.set(r);
        assert_eq!(roundtrip(&c, front, b"cut"), None);
        assert!(net.counters.blocked.load(Ordering::Relaxed) >= 1);

        // Asymmetric: 2 → 1 blocked only; the request arrives, the echo does not.
        let mut r = Rules::default();
        r.blocked.insert((2, 1));
        net.set(r);
        assert_eq!(roundtrip(&c, front, b"one way"), None);

        net.set(Rules {
            delay: Duration::from_millis(150),
            ..Rules::default()
        });
        let t = Instant::now();
        assert_eq!(roundtrip(&c, front, b"slow").as_deref(), Some(&b"slow"[..]));
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "delay applied both ways"
        );

        net.set(Rules {
            loss: 1.0,
            ..Rules::default()
        });
        assert_eq!(roundtrip(&c, front, b"lost"), None);
        assert!(net.counters.lost.load(Ordering::Relaxed) >= 1);

        net.heal();
        assert_eq!(roundtrip(&c, front, b"back").as_deref(), Some(&b"back"[..]));
        net.stop();
        relay.join();
        stop_echo.store(true, Ordering::SeqCst);
        eh.join().unwrap();
    }
}
