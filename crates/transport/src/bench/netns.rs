//! The bench's real network path: two network namespaces joined by a veth pair, made for one
//! run (names carry this process's id) and removed when the [`VethPair`] is dropped — on
//! success, on error and on panic; SIGINT and SIGTERM are caught while it lives (they stop
//! the bench's children, the error unwinds, the guard runs). A run killed outright
//! (SIGKILL) leaves its namespaces behind; the next run removes those whose process is gone.
//!
//! Needs root and iproute2's `ip`; [`VethPair::create`] says why when it cannot make them.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{bail, Context};

/// Namespace names start with this, then the creating process's id.
const PREFIX: &str = "kvfb-";
/// The server's address in its namespace.
pub(crate) const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
/// The client's address in its namespace.
pub(crate) const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);

/// Which end of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The namespace the server process runs in.
    Server,
    /// The namespace the measuring client runs in.
    Client,
}

/// Two namespaces joined by a veth pair; deleted on drop.
pub(crate) struct VethPair {
    /// Namespace names, server then client.
    ns: [String; 2],
    /// Interface names (at most 15 bytes), server then client.
    ifs: [String; 2],
}

/// The signal that interrupted the bench while a pair lived (0: none). A signal handler can
/// only reach statics; nothing else is kept here.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);
/// The bench's child processes (0: none), which the handler stops on SIGINT or SIGTERM.
static CHILDREN: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];

extern "C" fn on_signal(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
    for child in &CHILDREN {
        let pid = child.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe; a pid already gone only fails.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// Runs `ip ARGS`, failing with its standard error.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running `ip {}`", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Deletes namespaces left by earlier runs whose process no longer exists.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "delete", name]);
        }
    }
}

impl VethPair {
    /// Makes the pair (MTU 1500, addressed, up), or says why it cannot.
    pub(crate) fn create() -> Result<VethPair, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        remove_stale();
        let pid = std::process::id();
        let pair = VethPair {
            ns: [format!("{PREFIX}{pid}-s"), format!("{PREFIX}{pid}-c")],
            ifs: [format!("kvfb{pid}s"), format!("kvfb{pid}c")],
        };
        // From here on a failure drops `pair`, which deletes whatever was made.
        pair.set_up().map_err(|e| format!("{e:#}"))?;
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only stores to atomics and calls kill(2).
            unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
        }
        Ok(pair)
    }

    fn set_up(&self) -> anyhow::Result<()> {
        let [ns_s, ns_c] = &self.ns;
        let [if_s, if_c] = &self.ifs;
        ip(&["netns", "add", ns_s])?;
        ip(&["netns", "add", ns_c])?;
        ip(&[
            "link", "add", if_s, "netns", ns_s, "type", "veth", "peer", "name", if_c, "netns", ns_c,
        ])?;
        for (ns, dev, addr) in [(ns_s, if_s, SERVER_IP), (ns_c, if_c, CLIENT_IP)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        self.set_mtu(1500)
    }

    /// Sets both ends' MTU.
    pub(crate) fn set_mtu(&self, mtu: u32) -> anyhow::Result<()> {
        for (ns, dev) in self.ns.iter().zip(&self.ifs) {
            ip(&["-n", ns, "link", "set", dev, "mtu", &mtu.to_string()])?;
        }
        Ok(())
    }

    /// A command that runs `exe` inside `side`'s namespace (`ip netns exec` executes it in
    /// place, so the child's pid is the program's).
    pub(crate) fn command(&self, side: Side, exe: &std::path::Path) -> Command {
        let ns = match side {
            Side::Server => &self.ns[0],
            Side::Client => &self.ns[1],
        };
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(exe);
        c
    }

    /// Records a child for the signal handler to stop (`slot` 0 or 1; pid 0 forgets it).
    pub(crate) fn watch_child(&self, slot: usize, pid: u32) {
        CHILDREN[slot].store(pid as i32, Ordering::SeqCst);
    }

    /// The namespaces' names, server then client.
    pub(crate) fn names(&self) -> &[String; 2] {
        &self.ns
    }
}

/// The signal that interrupted the run, if one did.
pub(crate) fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for child in &CHILDREN {
            child.store(0, Ordering::SeqCst);
        }
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: restoring the default disposition has no preconditions.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
        // Deleting a namespace deletes the veth end inside it, and so the pair.
        for ns in &self.ns {
            if let Err(e) = ip(&["netns", "delete", ns]) {
                // Only when it was never made; anything else is worth a word.
                let msg = format!("{e:#}");
                if !msg.contains("No such file") {
                    eprintln!("bench transport: removing network namespace {ns}: {msg}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespaces() -> String {
        let out = Command::new("ip").args(["netns", "list"]).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// As root the pair is made and gone after drop; otherwise the reason names root.
    #[test]
    fn a_pair_is_removed_when_dropped() {
        match VethPair::create() {
            Ok(pair) => {
                let names = pair.names().clone();
                pair.set_mtu(9000).expect("jumbo MTU on veth");
                let listed = namespaces();
                assert!(
                    names.iter().all(|n| listed.contains(n.as_str())),
                    "{listed}"
                );
                drop(pair);
                let listed = namespaces();
                assert!(
                    !names.iter().any(|n| listed.contains(n.as_str())),
                    "{listed}"
                );
            }
            // SAFETY: geteuid has no preconditions.
            Err(reason) if unsafe { libc::geteuid() } != 0 => {
                assert!(reason.contains("not root"), "{reason}")
            }
            Err(reason) => panic!("root, yet no namespaces: {reason}"),
        }
    }
}
