//! Identities the node handles besides the store's: [`NodeId`] and [`ChunkKey`].
//!
//! Both mirror the directory crate's types of the same name (`kvfabric_directory::ids`), so
//! that wiring the directory replaces these definitions without touching their users.

use std::fmt;

use kvfabric_store::id::{parse_hex32, ParseIdError};

/// A fabric node: a positive integer in configs, shown as `n<id>` in the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeId(pub(crate) u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A chunk key computed by clients from tokens: 32 opaque bytes, 64 hex digits on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ChunkKey(pub(crate) [u8; 32]);

impl ChunkKey {
    /// Parses 64 hex digits.
    pub(crate) fn from_hex(s: &str) -> Result<ChunkKey, ParseIdError> {
        parse_hex32(s).map(ChunkKey)
    }

    /// Lowercase hex.
    pub(crate) fn to_hex(self) -> String {
        kvfabric_store::BlockId(self.0).to_hex()
    }
}

impl fmt::Debug for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkKey({})", &self.to_hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_keys_round_trip_hex_and_reject_the_rest() {
        let hex = "ab".repeat(32);
        assert_eq!(ChunkKey::from_hex(&hex).unwrap().to_hex(), hex);
        assert_eq!(
            ChunkKey::from_hex(&"AB".repeat(32)).unwrap().to_hex(),
            hex,
            "upper case is accepted, lower case is shown"
        );
        assert!(ChunkKey::from_hex("ab").is_err());
        assert!(ChunkKey::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(NodeId(3).to_string(), "n3");
    }
}
