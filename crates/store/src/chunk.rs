//! Chunk keys: what clients compute from token ids, before any KV exists, to ask the fabric
//! where a chunk's block lives.
//!
//! One scheme, two modes, deterministic and identical in every process and language (no
//! process-seeded hash): blake3 in keyed mode, keyed by the namespace's public key
//! ([`NamespaceKey::derive`], from the name alone: a client needs no secret to compute them),
//! over this little-endian encoding:
//!
//! | bytes | field |
//! |---:|---|
//! | 4 | magic `KVFC` |
//! | 1 | scheme version = 1 |
//! | 1 | mode: 0 prefix-chained, 1 position-independent |
//! | 16 | model fingerprint ([`crate::geometry::fingerprint`]) |
//! | 32 | parent: the previous chunk's key in prefix mode (zeros for the first chunk); zeros in independent mode |
//! | 4 | token count `n`, u32 |
//! | 4·n | the token ids, u32 each |
//!
//! - prefix mode: `key_i = H(…, parent = key_{i-1}, tokens of chunk i)`: equal only for equal
//!   prefixes (what vLLM-style prefix caches key on);
//! - independent mode: `key = H(…, parent = 0, tokens)`: the same wherever the chunk sits.
//!
//! A node never resolves a chunk key as given: it files it in its directory keyed by the
//! namespace key derived from the cluster's secret (`kvfabric-core`'s
//! `directory_chunk_key`), so a chunk key computed for another tenant's namespace (anyone can
//! compute one) resolves to nothing under the caller's.
//!
//! Chunks are whole blocks (`block_tokens` of the model); a trailing partial chunk has no key,
//! since it cannot be a sealed block. Test vectors: `tests/data/chunk_keys.json`, checked
//! against this code and against the Python reference `tools/chunk_keys.py`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::geometry::ModelGeometry;
use crate::id::{hex32, parse_hex32, NamespaceKey, ParseIdError};

/// Scheme version carried in every key's input.
pub const CHUNK_KEY_VERSION: u8 = 1;

/// A chunk key: 32 bytes, shown as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChunkKey(pub [u8; 32]);

impl ChunkKey {
    /// Lowercase hex (64 chars).
    pub fn to_hex(&self) -> String {
        hex32(&self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<ChunkKey, ParseIdError> {
        parse_hex32(s).map(ChunkKey)
    }
}

impl fmt::Display for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkKey({})", &self.to_hex()[..16])
    }
}

/// How chunk keys relate to the tokens before them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkMode {
    /// Each key chains the previous one: equal keys mean equal prefixes.
    Prefix,
    /// Each key depends only on its own tokens: equal wherever the chunk sits.
    Independent,
}

impl ChunkMode {
    const fn code(self) -> u8 {
        match self {
            ChunkMode::Prefix => 0,
            ChunkMode::Independent => 1,
        }
    }
}

/// The key of one chunk of `tokens` given its `parent` (ignored in independent mode).
pub fn chunk_key(
    namespace: &NamespaceKey,
    fingerprint: &[u8; 16],
    mode: ChunkMode,
    parent: Option<&ChunkKey>,
    tokens: &[u32],
) -> ChunkKey {
    let mut h = blake3::Hasher::new_keyed(&namespace.0);
    h.update(b"KVFC");
    h.update(&[CHUNK_KEY_VERSION, mode.code()]);
    h.update(fingerprint);
    let zero = [0u8; 32];
    let parent = match (mode, parent) {
        (ChunkMode::Prefix, Some(p)) => &p.0,
        _ => &zero,
    };
    h.update(parent);
    h.update(&(tokens.len() as u32).to_le_bytes());
    for t in tokens {
        h.update(&t.to_le_bytes());
    }
    ChunkKey(*h.finalize().as_bytes())
}

/// The keys of every whole chunk of `tokens` for `geometry` (chunks of `block_tokens`).
pub fn chunk_keys(
    namespace: &NamespaceKey,
    geometry: &ModelGeometry,
    mode: ChunkMode,
    tokens: &[u32],
) -> Vec<ChunkKey> {
    let fingerprint = geometry.fingerprint();
    let mut parent: Option<ChunkKey> = None;
    tokens
        .chunks_exact(geometry.block_tokens() as usize)
        .map(|chunk| {
            let key = chunk_key(namespace, &fingerprint, mode, parent.as_ref(), chunk);
            parent = Some(key);
            key
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::preset::builtin_preset;

    fn tokens(n: u32, offset: u32) -> Vec<u32> {
        (0..n).map(|i| i * 7 + offset).collect()
    }

    #[test]
    fn independent_keys_do_not_depend_on_what_comes_before() {
        let g = builtin_preset("deepseek-v3").unwrap();
        let ns = NamespaceKey::derive("t");
        let doc = tokens(128, 1000);
        let a = [tokens(64, 1), doc.clone()].concat();
        let b = [tokens(64, 2), doc].concat();
        let (ka, kb) = (
            chunk_keys(&ns, &g, ChunkMode::Independent, &a),
            chunk_keys(&ns, &g, ChunkMode::Independent, &b),
        );
        assert_ne!(ka[0], kb[0]);
        assert_eq!(
            ka[1..],
            kb[1..],
            "the shared document has the same keys behind any preamble"
        );
        let (pa, pb) = (
            chunk_keys(&ns, &g, ChunkMode::Prefix, &a),
            chunk_keys(&ns, &g, ChunkMode::Prefix, &b),
        );
        assert!(
            pa.iter().zip(&pb).all(|(x, y)| x != y),
            "prefix keys differ after a difference"
        );
    }

    #[test]
    fn partial_chunks_have_no_key_and_namespaces_and_models_separate() {
        let g = builtin_preset("deepseek-v3").unwrap();
        let k = builtin_preset("kimi-k2").unwrap();
        let t = tokens(130, 5);
        let ns = NamespaceKey::derive("t");
        assert_eq!(chunk_keys(&ns, &g, ChunkMode::Prefix, &t).len(), 2);
        let other_ns = chunk_keys(&NamespaceKey::derive("u"), &g, ChunkMode::Prefix, &t);
        assert_ne!(chunk_keys(&ns, &g, ChunkMode::Prefix, &t), other_ns);
        assert_ne!(
            chunk_keys(&ns, &g, ChunkMode::Prefix, &t),
            chunk_keys(&ns, &k, ChunkMode::Prefix, &t),
            "same dims, different model: different keys"
        );
    }
}
