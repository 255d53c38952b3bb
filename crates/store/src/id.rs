//! Block identity: `BlockId = blake3_keyed(namespace key, header ‖ payload)`.
//!
//! Keyed per namespace: the same bytes sealed by two tenants get two ids, so dedup, lookups
//! and timing never reveal one tenant's content to another. A namespace declared shared is
//! simply one namespace that several tenants are allowed to use.
//!
//! A node derives its namespace keys from the cluster's [`NamespaceSecret`] and the name
//! ([`NamespaceKey::from_secret`]), so nobody without the secret can compute an id of another
//! tenant's content. [`NamespaceKey::derive`] (from the name alone, public) is what chunk keys
//! are keyed by ([`crate::chunk`]: clients compute them before any KV exists) and what tests
//! use; a node never keys block ids with it.
//!
//! A build with the `colliding-ids` feature (tests of the collision path only) keeps 4 bits of
//! every digest, so different bytes get the same id at will; every id the crate computes goes
//! through one function, `id_of_digest`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Context string of the public derivation from a name (chunk keys); changing it changes
/// every chunk key.
const NAMESPACE_CONTEXT: &str = "kvfabric 2026-11 namespace v1";
/// Context string of the derivation from a secret and a name; changing it changes every id.
const SECRET_NAMESPACE_CONTEXT: &str = "kvfabric 2026-12 namespace from secret v2";
/// Context string of a secret's public id.
const SECRET_ID_CONTEXT: &str = "kvfabric 2026-12 namespace secret id v1";

/// A block's content id: 32 bytes, shown as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockId(pub [u8; 32]);

impl BlockId {
    /// Lowercase hex (64 chars).
    pub fn to_hex(&self) -> String {
        hex32(&self.0)
    }

    /// Parses 64 lowercase or uppercase hex digits.
    pub fn from_hex(s: &str) -> Result<BlockId, ParseIdError> {
        parse_hex32(s).map(BlockId)
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlockId({})", &self.to_hex()[..16])
    }
}

/// A malformed hex id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected 64 hex digits, found {found:?}")]
pub struct ParseIdError {
    /// The input (truncated to 80 chars).
    pub found: String,
}

pub(crate) fn hex32(b: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for byte in b {
        s.push(HEX[(byte >> 4) as usize] as char);
        s.push(HEX[(byte & 15) as usize] as char);
    }
    s
}

/// Parses 64 hex digits into 32 bytes.
pub fn parse_hex32(s: &str) -> Result<[u8; 32], ParseIdError> {
    let err = || ParseIdError {
        found: s.chars().take(80).collect(),
    };
    let b = s.as_bytes();
    if b.len() != 64 {
        return Err(err());
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nibble(b[2 * i]).ok_or_else(err)? << 4) | nibble(b[2 * i + 1]).ok_or_else(err)?;
    }
    Ok(out)
}

/// The key that separates one namespace's ids from every other's.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NamespaceKey(pub [u8; 32]);

impl NamespaceKey {
    /// The public key of a name (blake3 derive-key mode): what chunk keys are keyed by. Anyone
    /// can compute it; a node keys block ids with [`NamespaceKey::from_secret`].
    pub fn derive(name: &str) -> NamespaceKey {
        NamespaceKey(blake3::derive_key(NAMESPACE_CONTEXT, name.as_bytes()))
    }

    /// The key of namespace `name` under `secret`: blake3 keyed by a key derived from the
    /// secret, over the name. Without the secret it cannot be computed, and one namespace's
    /// key says nothing about another's or about the secret.
    pub fn from_secret(secret: &NamespaceSecret, name: &str) -> NamespaceKey {
        let key = blake3::derive_key(SECRET_NAMESPACE_CONTEXT, &secret.0);
        NamespaceKey(*blake3::keyed_hash(&key, name.as_bytes()).as_bytes())
    }

    /// Lowercase hex (64 chars).
    pub fn to_hex(&self) -> String {
        hex32(&self.0)
    }
}

/// The cluster's namespace secret: 32 random bytes every member loads, from which every
/// namespace key is derived. Never printed ([`fmt::Debug`] shows its [`NamespaceSecret::id`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NamespaceSecret(pub [u8; 32]);

impl NamespaceSecret {
    /// A public name for the secret (16 hex digits of a one-way derivation): what logs and
    /// views show, so members can be compared without revealing it.
    pub fn id(&self) -> String {
        hex32(&blake3::derive_key(SECRET_ID_CONTEXT, &self.0))[..16].to_owned()
    }
}

impl fmt::Debug for NamespaceSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NamespaceSecret(id {})", self.id())
    }
}

impl fmt::Debug for NamespaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NamespaceKey({})", &hex32(&self.0)[..16])
    }
}

/// Bits of the blake3 digest a block id keeps in a `colliding-ids` build: 16 ids in all, so
/// tests can put different bytes under one id (the collision path) at will.
#[cfg(feature = "colliding-ids")]
pub const COLLIDING_ID_BITS: u32 = 4;

/// The block id of a finished keyed-blake3 digest: the digest itself, or in a
/// `colliding-ids` build its first [`COLLIDING_ID_BITS`] bits (the rest zero). Every id the
/// crate computes (sealing, verification, disk and transport receive) goes through here.
pub(crate) fn id_of_digest(digest: [u8; 32]) -> BlockId {
    #[cfg(feature = "colliding-ids")]
    {
        let mut id = [0u8; 32];
        id[0] = digest[0] & !(u8::MAX >> COLLIDING_ID_BITS);
        BlockId(id)
    }
    #[cfg(not(feature = "colliding-ids"))]
    BlockId(digest)
}

/// Computes block ids. The store takes one so tests can plant collisions with a weak hash;
/// production always uses [`Blake3Ids`].
pub trait IdHasher: Send + Sync {
    /// Starts an id under `key`, fed incrementally.
    fn begin(&self, key: &NamespaceKey) -> Box<dyn IdStream>;

    /// The id of `parts` concatenated, under `key`.
    fn id(&self, key: &NamespaceKey, parts: &[&[u8]]) -> BlockId {
        let mut s = self.begin(key);
        for p in parts {
            s.update(p);
        }
        s.finish()
    }
}

/// An id being computed incrementally.
pub trait IdStream: Send {
    /// Feeds bytes.
    fn update(&mut self, bytes: &[u8]);
    /// The id of everything fed.
    fn finish(&self) -> BlockId;
}

/// blake3 in keyed mode: the production id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Blake3Ids;

impl IdHasher for Blake3Ids {
    fn begin(&self, key: &NamespaceKey) -> Box<dyn IdStream> {
        Box::new(StreamingId::new(key))
    }
}

impl IdStream for StreamingId {
    fn update(&mut self, bytes: &[u8]) {
        StreamingId::update(self, bytes);
    }
    fn finish(&self) -> BlockId {
        self.finalize()
    }
}

/// Incremental id computation, for verifying bytes as they arrive.
#[derive(Clone)]
pub struct StreamingId {
    hasher: blake3::Hasher,
}

impl StreamingId {
    /// Starts an id under `key`.
    pub fn new(key: &NamespaceKey) -> StreamingId {
        StreamingId {
            hasher: blake3::Hasher::new_keyed(&key.0),
        }
    }

    /// Feeds bytes. Inputs of 128 KiB or more are hashed on the calling thread with SIMD.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The id of everything fed.
    pub fn finalize(&self) -> BlockId {
        id_of_digest(*self.hasher.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_a_secret_differ_from_the_public_ones_and_between_secrets() {
        let s1 = NamespaceSecret([1; 32]);
        let s2 = NamespaceSecret([2; 32]);
        let a1 = NamespaceKey::from_secret(&s1, "team-a");
        assert_eq!(
            a1,
            NamespaceKey::from_secret(&s1, "team-a"),
            "deterministic"
        );
        assert_ne!(
            a1,
            NamespaceKey::derive("team-a"),
            "not the name's public key"
        );
        assert_ne!(
            a1,
            NamespaceKey::from_secret(&s2, "team-a"),
            "another secret"
        );
        assert_ne!(a1, NamespaceKey::from_secret(&s1, "team-b"), "another name");
        assert_ne!(s1.id(), s2.id());
        assert_eq!(s1.id().len(), 16);
        let shown = format!("{s1:?}");
        assert!(shown.contains(&s1.id()), "{shown}");
        assert!(
            !shown.contains("0101"),
            "the secret is never printed: {shown}"
        );
    }
}
