//! The demo's workload and its stand-in engine, both deterministic from the seed.
//!
//! Every agent's prompt is whole 64-token chunks:
//!
//! ```text
//! [system]  [preamble 1–2]  [document a] [document b] ([document c])  [question]
//!  shared    unique to it    2–3 documents of the shared pool, agent-specific order
//! ```
//!
//! The system chunk is the same for every agent (what a prefix-only cache can reuse); the
//! documents sit behind a different preamble in every agent (what only position-independent
//! chunk keys can reuse). The "engine" computes a chunk's latent from the model and the chunk's
//! own tokens alone (chunk-local encoding), so the same document chunk always gives the same
//! bytes, wherever it sits.

use kvfabric_store::ModelGeometry;

/// Token ids are drawn below this (DeepSeek-V3's vocabulary size).
const VOCAB: u64 = 129_280;

/// Stream tags, so that no two kinds of content share a random stream.
const TAG_SYSTEM: u64 = 1;
const TAG_DOC: u64 = 2;
const TAG_PREAMBLE: u64 = 3;
const TAG_QUESTION: u64 = 4;
const TAG_AGENT: u64 = 5;

/// What a chunk of an agent's prompt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// The system prompt every agent starts with.
    System,
    /// The agent's own preamble.
    Preamble,
    /// A chunk of a shared document.
    Document,
    /// The agent's own question.
    Question,
}

/// One agent: where it runs and what it reads.
#[derive(Debug, Clone)]
pub struct AgentPlan {
    /// Its number, from 0.
    pub index: usize,
    /// Its node (0-based index into the cluster's nodes).
    pub node: usize,
    /// The documents it reads, in its order.
    pub docs: Vec<usize>,
    /// Its whole prompt (a multiple of the block size).
    pub tokens: Vec<u32>,
    /// What each chunk of `tokens` is.
    pub kinds: Vec<ChunkKind>,
}

/// The whole workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The shared documents' chunk counts.
    pub doc_chunks: Vec<usize>,
    /// The agents, in order.
    pub agents: Vec<AgentPlan>,
}

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, tag: u64, index: u64) -> Rng {
        let mut r = Rng(seed ^ tag.wrapping_mul(0xA076_1D64_78BD_642F));
        r.0 ^= r
            .next()
            .wrapping_add(index.wrapping_mul(0xE703_7ED1_A0B4_28DB));
        r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.below(VOCAB) as u32).collect()
    }
}

impl Workload {
    /// `agents` agents over `nodes` nodes, a pool of `docs` documents, chunks of `block`
    /// tokens, all from `seed`.
    pub fn new(seed: u64, agents: usize, docs: usize, nodes: usize, block: usize) -> Self {
        let system = Rng::new(seed, TAG_SYSTEM, 0).tokens(block);
        let doc_tokens: Vec<Vec<u32>> = (0..docs)
            .map(|d| {
                let mut r = Rng::new(seed, TAG_DOC, d as u64);
                let chunks = 1 + r.below(3) as usize;
                r.tokens(chunks * block)
            })
            .collect();
        let agents = (0..agents)
            .map(|i| {
                let mut r = Rng::new(seed, TAG_AGENT, i as u64);
                let preamble_chunks = 1 + r.below(2) as usize;
                let mut order: Vec<usize> = (0..docs).collect();
                for k in (1..order.len()).rev() {
                    order.swap(k, r.below(k as u64 + 1) as usize);
                }
                let read = (2 + r.below(2) as usize).min(docs);
                order.truncate(read);
                let mut tokens = system.clone();
                let mut kinds = vec![ChunkKind::System];
                tokens
                    .extend(Rng::new(seed, TAG_PREAMBLE, i as u64).tokens(preamble_chunks * block));
                kinds.extend(std::iter::repeat_n(ChunkKind::Preamble, preamble_chunks));
                for d in &order {
                    tokens.extend_from_slice(&doc_tokens[*d]);
                    kinds.extend(std::iter::repeat_n(
                        ChunkKind::Document,
                        doc_tokens[*d].len() / block,
                    ));
                }
                tokens.extend(Rng::new(seed, TAG_QUESTION, i as u64).tokens(block));
                kinds.push(ChunkKind::Question);
                AgentPlan {
                    index: i,
                    node: i % nodes,
                    docs: order,
                    tokens,
                    kinds,
                }
            })
            .collect();
        Workload {
            doc_chunks: doc_tokens.iter().map(|t| t.len() / block).collect(),
            agents,
        }
    }
}

/// The stand-in engine: the canonical (un-rotated) latent of one chunk, a function of the
/// model and the chunk's own tokens only. Finite BF16 values of magnitude below 2 (the payload
/// of the DeepSeek presets is BF16 throughout).
pub fn engine_block(g: &ModelGeometry, tokens: &[u32]) -> Vec<u8> {
    let mut h = blake3::Hasher::new_derive_key("kvfabric demo engine v1: canonical latent");
    h.update(&(g.name.len() as u64).to_le_bytes());
    h.update(g.name.as_bytes());
    h.update(&(tokens.len() as u64).to_le_bytes());
    for t in tokens {
        h.update(&t.to_le_bytes());
    }
    let mut out = vec![0u8; g.block_layout().payload_len as usize];
    h.finalize_xof().fill(&mut out);
    for pair in out.chunks_exact_mut(2) {
        let r = u16::from_le_bytes([pair[0], pair[1]]);
        // Sign and 7 mantissa bits from r; exponent 120..=127, so |v| in [2^-7, 2).
        let v = (r & 0x807F) | ((0x78 + ((r >> 7) & 0x7)) << 7);
        pair.copy_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvfabric_store::geometry::preset::builtin_preset;

    #[test]
    fn the_workload_is_deterministic_and_shares_documents_behind_different_preambles() {
        let a = Workload::new(7, 16, 6, 3, 64);
        let b = Workload::new(7, 16, 6, 3, 64);
        assert_eq!(a.agents.len(), 16);
        for (x, y) in a.agents.iter().zip(&b.agents) {
            assert_eq!(x.tokens, y.tokens);
            assert_eq!(x.tokens.len(), x.kinds.len() * 64);
            assert!((2..=3).contains(&x.docs.len()));
            assert_eq!(x.node, x.index % 3);
            assert_eq!(x.kinds[0], ChunkKind::System);
            assert_eq!(x.kinds.last(), Some(&ChunkKind::Question));
        }
        assert_eq!(a.agents[0].tokens[..64], a.agents[1].tokens[..64]);
        assert_ne!(a.agents[0].tokens[64..128], a.agents[1].tokens[64..128]);
        let c = Workload::new(8, 16, 6, 3, 64);
        assert_ne!(a.agents[0].tokens, c.agents[0].tokens, "the seed matters");
    }

    #[test]
    fn the_engine_depends_on_the_chunk_alone_and_writes_finite_bf16() {
        let g = builtin_preset("deepseek-v3").unwrap();
        let t: Vec<u32> = (0..64).collect();
        let x = engine_block(&g, &t);
        assert_eq!(x.len(), 4_497_408);
        assert_eq!(x, engine_block(&g, &t));
        let u: Vec<u32> = (1..65).collect();
        assert_ne!(x, engine_block(&g, &u));
        assert!(x.chunks_exact(2).all(|p| {
            let e = (u16::from_le_bytes([p[0], p[1]]) >> 7) & 0xFF;
            (0x78..=0x7F).contains(&e)
        }));
    }
}
