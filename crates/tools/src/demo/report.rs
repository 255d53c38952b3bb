//! The demo's figures and the table it prints.

use std::fmt::Write as _;
use std::time::Duration;

use super::driver::AgentOutcome;

/// Every figure the report shows.
#[derive(Debug, Default)]
pub struct Report {
    /// Model preset.
    pub model: String,
    /// Payload bytes of one block.
    pub block_bytes: u64,
    /// Tokens per block.
    pub block_tokens: u64,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Copies a put waits for.
    pub replication: u32,
    /// Workload seed.
    pub seed: u64,
    /// Agents run at a time.
    pub parallel: usize,
    /// Shared documents and their chunks.
    pub docs: usize,
    /// Chunks of all shared documents.
    pub doc_chunks: usize,
    /// What each agent did.
    pub agents: Vec<AgentOutcome>,
    /// Tokens a prefix-only cache would have reused.
    pub prefix_reused_tokens: u64,
    /// Owners of each distinct block at the end.
    pub copies: Vec<usize>,
    /// Transport payload bytes received, all nodes.
    pub transport_bytes_in: u64,
    /// Fetched blocks received and verified by the transport (cross-node reads), all nodes.
    pub transport_fetches_ok: u64,
    /// Pushed blocks (replica copies) a receiver verified and stored, all nodes.
    pub transport_pushes_stored: u64,
    /// Transport fetches that failed, all nodes.
    pub transport_fetches_failed: u64,
    /// Received blocks whose hash did not match, all nodes.
    pub transport_verify_failures: u64,
    /// Store reads whose bytes did not match their id, all nodes.
    pub store_verify_failures: u64,
    /// `dedup_collisions`, all nodes.
    pub dedup_collisions: u64,
    /// Time to bring the cluster up.
    pub up: Duration,
    /// Time the agents took.
    pub workload: Duration,
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes with a binary unit.
fn bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / f64::from(1u32 << 30))
    } else {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// The sum of every sample of metric `name` whose labels include `label` (`key="value"`).
pub fn metric_sum(text: &str, name: &str, label: Option<&str>) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            if let Some(want) = label {
                if !labels.split(',').any(|kv| kv == want) {
                    return None;
                }
            }
            value.trim().parse::<f64>().ok()
        })
        .map(|v| v as u64)
        .sum()
}

impl Report {
    /// Chunks over all agents.
    pub fn chunks(&self) -> u64 {
        self.agents.iter().map(|a| a.chunks).sum()
    }

    /// Tokens reused by kvfabric.
    pub fn reused_tokens(&self) -> u64 {
        self.agents.iter().map(AgentOutcome::reused).sum::<u64>() * self.block_tokens
    }

    fn hits_of(&self, kind: usize) -> u64 {
        self.agents.iter().map(|a| a.hits[kind]).sum::<u64>() * self.block_tokens
    }

    /// Reads whose bytes differed from the engine's.
    pub fn mismatches(&self) -> u64 {
        self.agents.iter().map(|a| a.mismatches).sum()
    }

    /// The table.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let tokens = self.chunks() * self.block_tokens;
        let reused = self.reused_tokens();
        let computed: u64 = self.agents.iter().map(|a| a.computed).sum::<u64>() * self.block_tokens;
        let puts: [u64; 3] = std::array::from_fn(|i| self.agents.iter().map(|a| a.puts[i]).sum());
        let put_count: u64 = puts.iter().sum();
        let replicas: u64 = self.agents.iter().map(|a| a.replicas).sum();
        let replicas_min = self.agents.iter().filter_map(|a| a.replicas_min).min();
        let reads: u64 = self.agents.iter().map(AgentOutcome::reused).sum();
        let remote: u64 = self.agents.iter().map(|a| a.remote_reads).sum();
        let ratio = if self.prefix_reused_tokens == 0 {
            "prefix-only reused nothing".to_owned()
        } else {
            format!(
                "{:.1}x the prefix-only cache",
                reused as f64 / self.prefix_reused_tokens as f64
            )
        };
        let (cmin, cmax) = (
            self.copies.iter().min().copied().unwrap_or(0),
            self.copies.iter().max().copied().unwrap_or(0),
        );
        let cmean = if self.copies.is_empty() {
            0.0
        } else {
            self.copies.iter().sum::<usize>() as f64 / self.copies.len() as f64
        };
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "kvfabric demo report: {} ({} B per {}-token block), {} nodes, replication {}, seed {}",
            self.model,
            thousands(self.block_bytes),
            self.block_tokens,
            self.nodes,
            self.replication,
            self.seed
        );
        let _ = writeln!(
            s,
            "workload: {} agents ({} at a time), {} shared documents ({} chunks), {} chunks, {} tokens",
            self.agents.len(),
            self.parallel,
            self.docs,
            self.doc_chunks,
            thousands(self.chunks()),
            thousands(tokens)
        );
        let _ = writeln!(s);
        let row = |s: &mut String, name: &str, value: String, note: String| {
            let line = format!("  {name:<36} {value:>14}  {note}");
            let _ = writeln!(s, "{}", line.trim_end());
        };
        let _ = writeln!(s, "  {:<36} {:>14}  share of all tokens", "tokens", "");
        row(
            &mut s,
            "prompt tokens, all agents",
            thousands(tokens),
            "100.0%".into(),
        );
        row(
            &mut s,
            "reused by a prefix-only cache",
            thousands(self.prefix_reused_tokens),
            pct(self.prefix_reused_tokens, tokens),
        );
        row(
            &mut s,
            "reused by kvfabric",
            thousands(reused),
            format!("{} ({ratio})", pct(reused, tokens)),
        );
        row(
            &mut s,
            "  of which system prompt",
            thousands(self.hits_of(0)),
            String::new(),
        );
        row(
            &mut s,
            "  of which shared documents",
            thousands(self.hits_of(2)),
            "behind a different preamble in every agent".into(),
        );
        row(
            &mut s,
            "computed (and put)",
            thousands(computed),
            pct(computed, tokens),
        );
        let _ = writeln!(s);
        let _ = writeln!(s, "  fabric");
        row(
            &mut s,
            "puts",
            thousands(put_count),
            format!(
                "dedup: new {}, shared {}, collision {}",
                puts[0], puts[1], puts[2]
            ),
        );
        row(
            &mut s,
            "verified replicas per put",
            if put_count == 0 {
                "-".into()
            } else {
                format!("{:.2}", replicas as f64 / put_count as f64)
            },
            format!(
                "min {} (copies on distinct nodes the put waited for)",
                replicas_min.map_or("-".into(), |m| m.to_string())
            ),
        );
        row(
            &mut s,
            "reads",
            thousands(reads),
            format!(
                "local {}, fetched from another node {}",
                reads - remote,
                remote
            ),
        );
        row(
            &mut s,
            "read mismatches",
            self.mismatches().to_string(),
            format!("of {reads} reads checked byte for byte against the engine"),
        );
        row(
            &mut s,
            "bytes moved between nodes",
            bytes(self.transport_bytes_in),
            format!(
                "{} B (transport bytes in, all nodes)",
                thousands(self.transport_bytes_in)
            ),
        );
        row(
            &mut s,
            "blocks verified on receipt",
            thousands(self.transport_pushes_stored + self.transport_fetches_ok),
            format!(
                "replica copies pushed {}, cross-node fetches {}; verify failures {}, failed fetches {}",
                thousands(self.transport_pushes_stored),
                thousands(self.transport_fetches_ok),
                self.transport_verify_failures,
                self.transport_fetches_failed
            ),
        );
        row(
            &mut s,
            "copies per distinct block",
            format!("{cmin} / {cmean:.2} / {cmax}"),
            format!(
                "min / mean / max over {} blocks (live owners)",
                self.copies.len()
            ),
        );
        row(
            &mut s,
            "dedup_collisions",
            self.dedup_collisions.to_string(),
            format!(
                "all nodes (store verify failures {})",
                self.store_verify_failures
            ),
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "time: cluster up {:.1} s, agents {:.1} s",
            self.up.as_secs_f64(),
            self.workload.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "note: reuse behind a different preamble is byte-exact for what the engine put, and valid \
             only if the engine encodes chunks locally; the fabric does not make a deeper layer's \
             latent independent of the tokens before it."
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(4_497_408), "4,497,408");
    }

    #[test]
    fn metric_sum_matches_name_and_label() {
        let text = "# TYPE x gauge\n\
                    kvfabric_transport{node=\"n1\",stat=\"bytes_in\"} 10\n\
                    kvfabric_transport{node=\"n1\",stat=\"bytes_out\"} 5\n\
                    kvfabric_dedup_collisions_total{node=\"n1\"} 0\n\
                    kvfabric_transport{node=\"n2\",stat=\"bytes_in\"} 7\n";
        assert_eq!(
            metric_sum(text, "kvfabric_transport", Some("stat=\"bytes_in\"")),
            17
        );
        assert_eq!(metric_sum(text, "kvfabric_dedup_collisions_total", None), 0);
        assert_eq!(metric_sum(text, "kvfabric_missing", None), 0);
    }
}
