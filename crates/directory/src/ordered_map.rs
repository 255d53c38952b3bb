//! Serde for the shard's hashed maps, written in ascending key order: a `HashMap` serialized
//! this way gives the bytes a `BTreeMap` of the same entries gives (a map, keys ascending), so
//! snapshots keep their format and two replicas with the same state write the same snapshot.
//!
//! The shard keeps its large maps (block → owners, chunk key → block) hashed: an ordered map
//! of 32-byte keys cost a tree search of a cache miss per level on every record applied, and
//! nothing reads them in order except a snapshot, which sorts once.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Serializes `map` as a map in ascending key order.
pub fn serialize<K, V, H, S>(map: &HashMap<K, V, H>, s: S) -> Result<S::Ok, S::Error>
where
    K: Ord + Serialize,
    V: Serialize,
    S: Serializer,
{
    let mut entries: Vec<(&K, &V)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    s.collect_map(entries)
}

/// Deserializes a map (any key order; a key given twice keeps its last value, as a
/// `BTreeMap` would).
pub fn deserialize<'de, K, V, H, D>(d: D) -> Result<HashMap<K, V, H>, D::Error>
where
    K: Eq + Hash + Deserialize<'de>,
    V: Deserialize<'de>,
    H: BuildHasher + Default,
    D: Deserializer<'de>,
{
    HashMap::<K, V, H>::deserialize(d)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Hashed(#[serde(with = "super")] HashMap<u32, u64>);

    proptest! {
        /// The bytes are those of a `BTreeMap` of the same entries, and decode back to them.
        #[test]
        fn encodes_as_a_btree_map(entries in prop::collection::vec((any::<u32>(), any::<u64>()), 0..60)) {
            let cfg = bincode::config::standard();
            let ours = Hashed(entries.iter().copied().collect());
            let model: BTreeMap<u32, u64> = entries.iter().copied().collect();
            let a = bincode::serde::encode_to_vec(&ours, cfg).unwrap();
            let b = bincode::serde::encode_to_vec(&model, cfg).unwrap();
            prop_assert_eq!(&a, &b);
            let (back, _): (Hashed, usize) = bincode::serde::decode_from_slice(&a, cfg).unwrap();
            prop_assert_eq!(back, ours);
        }
    }
}
