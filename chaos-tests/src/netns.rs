//! Nodes as separate hosts: one Linux network namespace per node (`ip netns`), a veth pair
//! from each into a bridge in the harness's namespace, and nftables rules inside each node's
//! namespace for partitions and packet loss. Delay stays in the user-space relay (this kernel
//! has no `tc netem`), which runs on the bridge.
//!
//! Addressing on subnet `10.231.S.0/24` (`S` per run): node `i` is `.i` inside its namespace;
//! the bridge is `.254` and carries the relays' fronts (the addresses peers dial, same port as
//! the node's) plus one upstream address per sending node, `.(100 + i)`, so that a rule in a
//! receiver's namespace can name the sender of relayed traffic.
//!
//! Everything is named with the prefix [`PREFIX`] and the harness's pid; [`Netns::drop`]
//! removes it, and [`reap_leftovers`] removes what a crashed run left.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::relay::Rules;

/// Prefix of every namespace and link the harness creates.
pub const PREFIX: &str = "kvfc";

fn run(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", args.join(" ")))?;
    succeeded(args, &out)
}

/// `Ok` when the command exited 0, else an error naming it and its stderr.
fn succeeded(args: &[&str], out: &std::process::Output) -> anyhow::Result<()> {
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn run_stdin(args: &[&str], input: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", args.join(" ")))?;
    if let Some(mut s) = child.stdin.take() {
        s.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    succeeded(args, &out)
}

/// Whether this machine can run nodes in namespaces: `ip netns` works (root) and `nft` exists.
/// `Err` says why not.
pub fn probe() -> anyhow::Result<()> {
    let name = format!("{PREFIX}probe{}", std::process::id());
    run(&["ip", "netns", "add", &name]).context("creating a network namespace")?;
    let nft = run(&["ip", "netns", "exec", &name, "nft", "list", "ruleset"]);
    let _ = run(&["ip", "netns", "del", &name]);
    nft.context("nftables (nft) in a namespace")
}

/// The namespaces, bridge and links of one run.
pub struct Netns {
    tag: String,
    subnet: u8,
    nodes: u32,
    dropped: std::sync::atomic::AtomicU64,
}

impl Netns {
    /// Creates a bridge and `nodes` namespaces wired to it.
    pub fn create(nodes: u32) -> anyhow::Result<Netns> {
        let pid = std::process::id();
        let tag = format!("{PREFIX}{}", pid % 100_000);
        let n = Netns {
            subnet: (pid % 200) as u8 + 20,
            tag,
            nodes,
            dropped: std::sync::atomic::AtomicU64::new(0),
        };
        // Dropped on failure half-way: what was made is removed.
        let bridge = n.bridge();
        run(&["ip", "link", "add", &bridge, "type", "bridge"])?;
        run(&["ip", "link", "set", &bridge, "up"])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", n.ip(254)),
            "dev",
            &bridge,
        ])?;
        for id in 1..=u64::from(nodes) {
            let up = n.upstream_ip(id).to_string();
            run(&["ip", "addr", "add", &format!("{up}/32"), "dev", &bridge])?;
            let ns = n.namespace(id);
            let veth = format!("{}v{id}", n.tag);
            run(&["ip", "netns", "add", &ns])?;
            run(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            run(&["ip", "link", "set", &veth, "master", &bridge, "up"])?;
            let e = |args: &[&str]| {
                let mut v = vec!["ip", "netns", "exec", ns.as_str()];
                v.extend_from_slice(args);
                run(&v)
            };
            e(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", n.ip(id as u8)),
                "dev",
                "eth0",
            ])?;
            e(&["ip", "link", "set", "eth0", "up"])?;
            e(&["ip", "link", "set", "lo", "up"])?;
            // The relays' upstream addresses are on the bridge's /24.
            run_stdin(
                &["ip", "netns", "exec", &ns, "nft", "-f", "-"],
                "table inet kvfc {\n chain input { type filter hook input priority 0; policy accept; }\n chain output { type filter hook output priority 0; policy accept; }\n}\n",
            )?;
        }
        Ok(n)
    }

    fn ip(&self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 231, self.subnet, host))
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// Node `id`'s namespace.
    pub fn namespace(&self, id: u64) -> String {
        format!("{}n{id}", self.tag)
    }

    /// Node `id`'s address (inside its namespace).
    pub fn node_ip(&self, id: u64) -> IpAddr {
        self.ip(id as u8)
    }

    /// The bridge address the relays' fronts listen on.
    pub fn relay_ip(&self) -> IpAddr {
        self.ip(254)
    }

    /// The address the relays forward node `id`'s packets from.
    pub fn upstream_ip(&self, id: u64) -> IpAddr {
        self.ip(100 + id as u8)
    }

    /// The node a source address belongs to (a node's own address).
    pub fn node_of(&self, ip: IpAddr) -> Option<u64> {
        match ip {
            IpAddr::V4(v)
                if v.octets()[..3] == [10, 231, self.subnet]
                    && (1..100).contains(&v.octets()[3]) =>
            {
                Some(u64::from(v.octets()[3]))
            }
            _ => None,
        }
    }

    /// Installs the partition and loss of `rules` as nftables rules in every node's namespace
    /// (replacing the previous ones).
    pub fn apply(&self, rules: &Rules) -> anyhow::Result<()> {
        self.collect_counters();
        for id in 1..=u64::from(self.nodes) {
            let mut script =
                String::from("flush chain inet kvfc input\nflush chain inet kvfc output\n");
            for &(from, to) in &rules.blocked {
                if to == id {
                    script += &format!(
                        "add rule inet kvfc input ip saddr {} counter drop\n",
                        self.upstream_ip(from)
                    );
                }
                if from == id {
                    // Answers to `to`'s own flows leave towards its upstream address.
                    script += &format!(
                        "add rule inet kvfc output ip daddr {} counter drop\n",
                        self.upstream_ip(to)
                    );
                }
            }
            if rules.loss > 0.0 {
                let per_mille = (rules.loss * 1000.0).round() as u32;
                script += &format!(
                    "add rule inet kvfc input meta l4proto udp numgen random mod 1000 < {per_mille} counter drop\n"
                );
            }
            run_stdin(
                &["ip", "netns", "exec", &self.namespace(id), "nft", "-f", "-"],
                &script,
            )?;
        }
        Ok(())
    }
}

impl Netns {
    /// Adds the packets the current rules dropped to [`Netns::dropped`].
    fn collect_counters(&self) {
        for id in 1..=u64::from(self.nodes) {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.namespace(id),
                    "nft",
                    "list",
                    "table",
                    "inet",
                    "kvfc",
                ])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default();
            let n: u64 = out
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .filter(|w| w[0] == "packets")
                .filter_map(|w| w[1].parse::<u64>().ok())
                .sum();
            self.dropped
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Packets dropped by the nftables rules replaced so far (partitions and loss; the
    /// nemesis heals, i.e. replaces, every rule set it installs).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for id in 1..=u64::from(self.nodes) {
            let _ = run(&["ip", "netns", "del", &self.namespace(id)]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge()]);
    }
}

/// Removes namespaces and bridges named [`PREFIX`]`PID…` whose harness `PID` is gone.
/// Returns how many were removed.
pub fn reap_leftovers() -> usize {
    let alive = |name: &str| -> bool {
        let digits: String = name[PREFIX.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let Ok(tag) = digits.parse::<u32>() else {
            return true;
        };
        // Tags are pid % 100000: a live harness with that tag keeps its objects.
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
            .filter(|p| p % 100_000 == tag)
            .any(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("kvfabric-chaos"))
                    .unwrap_or(false)
            })
    };
    let mut removed = 0;
    let list = |args: &[&str]| -> Vec<String> {
        Command::new(args[0])
            .args(&args[1..])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    for ns in list(&["ip", "netns", "list"]) {
        if ns.starts_with(PREFIX)
            && !ns.contains("probe")
            && !alive(&ns)
            && run(&["ip", "netns", "del", &ns]).is_ok()
        {
            removed += 1;
        }
    }
    let out = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    for line in out.lines() {
        let Some(name) = line.split(':').nth(1).map(str::trim) else {
            continue;
        };
        if name.starts_with(PREFIX) && !alive(name) && run(&["ip", "link", "del", name]).is_ok() {
            removed += 1;
        }
    }
    removed
}
