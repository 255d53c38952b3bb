//! The pure scoring of `POST /v1/route`: given, for every chunk of a request, which nodes
//! hold its block and in which tier, rank candidate nodes by what serving the request there
//! would cost. No I/O, no clock, no randomness: the same inputs give the same ranking.
//!
//! # The cost model
//!
//! All figures are seconds for one chunk (one block of `block_tokens` tokens and
//! `block_bytes` bytes); a node's `est_seconds` is their sum over the request.
//!
//! - **hit**: the node holds the chunk's block; it costs its read-back from the best tier the
//!   node holds it in, `block_bytes · 8 / (tier_read_gbps · 10⁹)`.
//! - **miss**: the cheaper of
//!   - *fetch*: from the cheapest holder `o`, `block_bytes · 8 / (bandwidth(o → node) · 10⁹)`
//!     plus `o`'s tier read-back (`bandwidth` is the measured EWMA, else the configured
//!     default); the node itself counts as a holder at zero network cost (a block it holds
//!     but cannot use as a hit in prefix mode);
//!   - *recompute*: `block_tokens / prefill_tokens_per_s`, also the price of a block nobody
//!     holds.
//!
//! Modes: in [`Mode::Prefix`] only the prefix keys count and only the leading run the node
//! holds is a hit (`prefix_hits`); past it a chunk can still be fetched, until the first one
//! recomputed, after which every chunk is recomputed (a prefix cache reuses a leading prefix
//! only). In [`Mode::Any`] the leading run is counted the same, then every later chunk whose
//! block the node holds (named by the prefix key or by the position-independent key) is an
//! `independent_hit`, and every miss is priced on its own.
//!
//! `score` is the seconds saved against recomputing every chunk (`chunks · recompute −
//! est_seconds`): higher is better, and it orders nodes exactly as `est_seconds` does. Ties
//! are broken by the lower node id.

use kvfabric_store::Tier;

use crate::ids::NodeId;

/// How chunks may be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Only a leading run of prefix keys is reused.
    Prefix,
    /// Any chunk whose block is held is reused, wherever it sits.
    Any,
}

/// The size of one chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkSize {
    /// Tokens per chunk (the model's block size).
    pub tokens: u32,
    /// Bytes of one block.
    pub bytes: u64,
}

/// The speeds the costs derive from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speeds {
    /// Recompute speed, tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Read-back speed per tier, Gbit/s: gpu, host, disk.
    pub tier_read_gbps: [f64; 3],
}

impl Speeds {
    /// Seconds to read one block of `bytes` back from `tier`.
    pub fn read_back(&self, tier: Tier, bytes: u64) -> f64 {
        let gbps = match tier {
            Tier::Gpu => self.tier_read_gbps[0],
            Tier::Host => self.tier_read_gbps[1],
            Tier::Disk => self.tier_read_gbps[2],
        };
        transfer_seconds(bytes, gbps)
    }
}

/// Seconds to move `bytes` at `gbps` Gbit/s.
pub fn transfer_seconds(bytes: u64, gbps: f64) -> f64 {
    bytes as f64 * 8.0 / (gbps * 1e9)
}

/// Who holds one chunk's block, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkHolders {
    /// Holders of the block its prefix key names (a node may appear once per tier).
    pub prefix: Vec<(NodeId, Tier)>,
    /// Holders of the block its position-independent key names.
    pub independent: Vec<(NodeId, Tier)>,
}

/// A node-to-node bandwidth: Gbit/s, and whether it was measured (else configured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Gbit/s.
    pub gbps: f64,
    /// Measured by fetches (else the configured default).
    pub measured: bool,
}

/// Hits per tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierHits {
    /// Hits read back from the gpu tier.
    pub gpu: u64,
    /// ... from the host tier.
    pub host: u64,
    /// ... from the disk tier.
    pub disk: u64,
}

impl TierHits {
    fn add(&mut self, tier: Tier) {
        match tier {
            Tier::Gpu => self.gpu += 1,
            Tier::Host => self.host += 1,
            Tier::Disk => self.disk += 1,
        }
    }
}

/// One node's score and its breakdown.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeScore {
    /// The node (`n<id>`).
    #[serde(serialize_with = "node_name")]
    pub node: NodeId,
    /// Seconds saved against recomputing every chunk; higher is better.
    pub score: f64,
    /// `prefix_hits + independent_hits`.
    pub hits: u64,
    /// Bytes of the hits (already on the node).
    pub bytes: u64,
    /// The leading run of chunks the node holds by prefix key.
    pub prefix_hits: u64,
    /// Later chunks the node holds (mode `any` only).
    pub independent_hits: u64,
    /// Hits by the tier they are read back from.
    pub hits_by_tier: TierHits,
    /// Misses cheaper to fetch from a holder.
    pub fetch: u64,
    /// Bytes those fetches move.
    pub fetch_bytes: u64,
    /// Misses cheaper to recompute, blocks nobody holds included.
    pub recompute: u64,
    /// Tokens those recomputes prefill.
    pub recompute_tokens: u64,
    /// The estimated cost of the request on this node: read-back of hits, fetches, recomputes.
    pub est_seconds: f64,
}

fn node_name<S: serde::Serializer>(n: &NodeId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(n)
}

/// The ranking: nodes best first, and whether every node pair priced was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// Best first.
    pub nodes: Vec<NodeScore>,
    /// At least one node pair was priced and all were measured.
    pub measured: bool,
}

/// The best (fastest) tier `node` holds among `holders`.
fn best_tier(holders: &[(NodeId, Tier)], node: NodeId) -> Option<Tier> {
    holders
        .iter()
        .filter(|(n, _)| *n == node)
        .map(|(_, t)| *t)
        .min()
}

/// Ranks `candidates` for a request of `chunks` in `mode`; `link(from, to)` prices a fetch
/// between two distinct nodes.
pub fn rank(
    candidates: &[NodeId],
    chunks: &[ChunkHolders],
    mode: Mode,
    size: ChunkSize,
    speeds: &Speeds,
    link: &dyn Fn(NodeId, NodeId) -> Link,
) -> Ranking {
    let recompute_s = f64::from(size.tokens) / speeds.prefill_tokens_per_s;
    let baseline = recompute_s * chunks.len() as f64;
    let mut priced = 0u64;
    let mut all_measured = true;
    let mut nodes: Vec<NodeScore> = candidates
        .iter()
        .map(|&node| {
            let mut s = NodeScore {
                node,
                score: 0.0,
                hits: 0,
                bytes: 0,
                prefix_hits: 0,
                independent_hits: 0,
                hits_by_tier: TierHits::default(),
                fetch: 0,
                fetch_bytes: 0,
                recompute: 0,
                recompute_tokens: 0,
                est_seconds: 0.0,
            };
            let mut in_run = true;
            let mut chain_broken = false;
            for c in chunks {
                let own_prefix = best_tier(&c.prefix, node);
                if in_run {
                    if let Some(t) = own_prefix {
                        s.prefix_hits += 1;
                        s.hits_by_tier.add(t);
                        s.est_seconds += speeds.read_back(t, size.bytes);
                        continue;
                    }
                    in_run = false;
                }
                let usable: Vec<(NodeId, Tier)> = match mode {
                    Mode::Prefix => c.prefix.clone(),
                    Mode::Any => c.prefix.iter().chain(&c.independent).copied().collect(),
                };
                if mode == Mode::Any {
                    if let Some(t) = best_tier(&usable, node) {
                        s.independent_hits += 1;
                        s.hits_by_tier.add(t);
                        s.est_seconds += speeds.read_back(t, size.bytes);
                        continue;
                    }
                }
                let mut fetch_s = f64::INFINITY;
                if !chain_broken {
                    for &(holder, tier) in &usable {
                        let network = if holder == node {
                            0.0
                        } else {
                            let l = link(holder, node);
                            priced += 1;
                            all_measured &= l.measured;
                            transfer_seconds(size.bytes, l.gbps)
                        };
                        fetch_s = fetch_s.min(network + speeds.read_back(tier, size.bytes));
                    }
                }
                if fetch_s < recompute_s {
                    s.fetch += 1;
                    s.fetch_bytes += size.bytes;
                    s.est_seconds += fetch_s;
                } else {
                    s.recompute += 1;
                    s.recompute_tokens += u64::from(size.tokens);
                    s.est_seconds += recompute_s;
                    chain_broken = mode == Mode::Prefix;
                }
            }
            s.hits = s.prefix_hits + s.independent_hits;
            s.bytes = s.hits * size.bytes;
            s.score = baseline - s.est_seconds;
            s
        })
        .collect();
    nodes.sort_by(|a, b| {
        a.est_seconds
            .total_cmp(&b.est_seconds)
            .then(a.node.cmp(&b.node))
    });
    Ranking {
        nodes,
        measured: priced > 0 && all_measured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: ChunkSize = ChunkSize {
        tokens: 64,
        bytes: 1_000_000,
    };

    fn speeds(prefill: f64) -> Speeds {
        Speeds {
            prefill_tokens_per_s: prefill,
            tier_read_gbps: [8000.0, 80.0, 16.0],
        }
    }

    fn link(gbps: f64, measured: bool) -> impl Fn(NodeId, NodeId) -> Link {
        move |_, _| Link { gbps, measured }
    }

    fn held(prefix: &[(u64, Tier)], independent: &[(u64, Tier)]) -> ChunkHolders {
        ChunkHolders {
            prefix: prefix.iter().map(|(n, t)| (NodeId(*n), *t)).collect(),
            independent: independent.iter().map(|(n, t)| (NodeId(*n), *t)).collect(),
        }
    }

    fn by_node(r: &Ranking, n: u64) -> &NodeScore {
        r.nodes.iter().find(|s| s.node == NodeId(n)).unwrap()
    }

    const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

    /// Chunks 0 and 1 on n1 (host, disk); chunk 2 on n2 by its independent key only.
    fn request() -> Vec<ChunkHolders> {
        vec![
            held(&[(1, Tier::Host)], &[]),
            held(&[(1, Tier::Disk)], &[]),
            held(&[], &[(2, Tier::Host)]),
        ]
    }

    #[test]
    fn prefix_mode_ranks_the_prefix_holder_first_and_ignores_independent_keys() {
        let r = rank(
            &NODES,
            &request(),
            Mode::Prefix,
            SIZE,
            &speeds(8000.0),
            &link(10.0, false),
        );
        assert_eq!(r.nodes[0].node, NodeId(1));
        let n1 = by_node(&r, 1);
        assert_eq!((n1.prefix_hits, n1.independent_hits, n1.hits), (2, 0, 2));
        assert_eq!(
            n1.hits_by_tier,
            TierHits {
                gpu: 0,
                host: 1,
                disk: 1
            }
        );
        assert_eq!(n1.bytes, 2 * SIZE.bytes);
        assert_eq!(
            (n1.fetch, n1.recompute),
            (0, 1),
            "nobody holds chunk 2 by prefix"
        );
        assert_eq!(n1.recompute_tokens, 64);
        let n2 = by_node(&r, 2);
        assert_eq!(n2.hits, 0, "{n2:?}");
        assert_eq!((n2.fetch, n2.recompute), (2, 1));
        assert!(!r.measured);
    }

    #[test]
    fn any_mode_counts_hits_behind_another_prefix() {
        let r = rank(
            &NODES,
            &request(),
            Mode::Any,
            SIZE,
            &speeds(8000.0),
            &link(10.0, true),
        );
        let n2 = by_node(&r, 2);
        assert_eq!((n2.prefix_hits, n2.independent_hits, n2.hits), (0, 1, 1));
        assert_eq!(n2.hits_by_tier.host, 1);
        assert_eq!(n2.fetch, 2);
        let n1 = by_node(&r, 1);
        assert_eq!((n1.hits, n1.fetch, n1.recompute), (2, 1, 0));
        let n3 = by_node(&r, 3);
        assert_eq!((n3.hits, n3.fetch, n3.recompute), (0, 3, 0));
        assert_eq!(n3.fetch_bytes, 3 * SIZE.bytes);
        assert!(r.measured);
        let order: Vec<u64> = r.nodes.iter().map(|s| s.node.0).collect();
        assert_eq!(order, vec![1, 2, 3]);
        for w in r.nodes.windows(2) {
            assert!(w[0].score >= w[1].score, "score orders as est_seconds does");
        }
    }

    #[test]
    fn a_miss_is_fetched_or_recomputed_whichever_is_cheaper() {
        let slow_prefill = rank(
            &NODES,
            &request(),
            Mode::Any,
            SIZE,
            &speeds(1e-3),
            &link(10.0, false),
        );
        let n3 = by_node(&slow_prefill, 3);
        assert_eq!((n3.fetch, n3.recompute), (3, 0));
        let fast_prefill = rank(
            &NODES,
            &request(),
            Mode::Any,
            SIZE,
            &speeds(1e12),
            &link(10.0, false),
        );
        let n3 = by_node(&fast_prefill, 3);
        assert_eq!((n3.fetch, n3.recompute), (0, 3));
        assert_eq!(n3.recompute_tokens, 3 * 64);
        // Fetch: 1 MB at 10 Gbit/s (0.8 ms) plus the holder's host read-back (0.1 ms).
        let r = rank(
            &[NodeId(3)],
            &[held(&[(1, Tier::Host)], &[])],
            Mode::Prefix,
            SIZE,
            &speeds(1e-3),
            &link(10.0, false),
        );
        assert!((r.nodes[0].est_seconds - 0.0009).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn prefix_mode_recomputes_everything_after_the_first_recompute() {
        // Chunk 1 is held nowhere; chunk 2 is on n1 but unusable once the prefix broke.
        let chunks = vec![
            held(&[(1, Tier::Host)], &[]),
            held(&[], &[]),
            held(&[(1, Tier::Host)], &[]),
        ];
        let r = rank(
            &[NodeId(2)],
            &chunks,
            Mode::Prefix,
            SIZE,
            &speeds(8000.0),
            &link(10.0, false),
        );
        let n2 = &r.nodes[0];
        assert_eq!((n2.fetch, n2.recompute), (1, 2), "{n2:?}");
    }

    #[test]
    fn ties_are_broken_by_node_id_and_the_fastest_link_wins() {
        let chunks = vec![held(&[(1, Tier::Host), (2, Tier::Host)], &[])];
        let links = |from: NodeId, _to: NodeId| Link {
            gbps: if from == NodeId(2) { 100.0 } else { 1.0 },
            measured: true,
        };
        let r = rank(
            &[NodeId(4), NodeId(3)],
            &chunks,
            Mode::Any,
            SIZE,
            &speeds(1e-3),
            &links,
        );
        let order: Vec<u64> = r.nodes.iter().map(|s| s.node.0).collect();
        assert_eq!(order, vec![3, 4], "equal costs: lower id first");
        let expected = transfer_seconds(SIZE.bytes, 100.0) + transfer_seconds(SIZE.bytes, 80.0);
        assert!((r.nodes[0].est_seconds - expected).abs() < 1e-12);
        let empty = rank(&[NodeId(1)], &[], Mode::Any, SIZE, &speeds(1.0), &links);
        assert_eq!(empty.nodes[0].est_seconds, 0.0);
        assert!(!empty.measured, "nothing priced");
    }
}
