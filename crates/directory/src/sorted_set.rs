//! [`SortedSet`]: a small ordered set kept as a sorted vector, for the directory's per-block
//! sets (a block's owners, a block's chunk keys), which hold one to a few entries each.
//!
//! A `BTreeSet` allocates a whole node (eleven slots) for its first entry and searches it with
//! a call per comparison; with a set per block and hundreds of thousands of blocks that
//! allocation and that search were most of what applying an ownership entry cost. A sorted
//! vector starts at one slot and grows as a vector does. It serializes exactly as a
//! `BTreeSet` of the same entries does (a sequence in ascending order), so snapshots keep
//! their format; deserializing sorts and removes duplicates, as collecting into a `BTreeSet`
//! would.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An ordered set of `T` as a sorted vector without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SortedSet<T>(Vec<T>);

impl<T> Default for SortedSet<T> {
    fn default() -> SortedSet<T> {
        SortedSet(Vec::new())
    }
}

impl<T: Ord> SortedSet<T> {
    /// Adds `value`; whether it was new.
    pub fn insert(&mut self, value: T) -> bool {
        match self.0.binary_search(&value) {
            Ok(_) => false,
            Err(at) => {
                if self.0.capacity() == 0 {
                    // Most sets hold one entry for good: allocate one slot, not four.
                    self.0.reserve_exact(1);
                }
                self.0.insert(at, value);
                true
            }
        }
    }

    /// Removes `value`; whether it was there.
    pub fn remove(&mut self, value: &T) -> bool {
        match self.0.binary_search(value) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `value` is in the set.
    pub fn contains(&self, value: &T) -> bool {
        self.0.binary_search(value).is_ok()
    }

    /// Keeps the entries `keep` accepts (order is kept).
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.0.retain(keep);
    }
}

impl<T> SortedSet<T> {
    /// The entries in ascending order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a, T> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> IntoIterator for SortedSet<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<T: Ord> FromIterator<T> for SortedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> SortedSet<T> {
        let mut v: Vec<T> = iter.into_iter().collect();
        v.sort();
        v.dedup();
        SortedSet(v)
    }
}

impl<T: Serialize> Serialize for SortedSet<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(&self.0)
    }
}

impl<'de, T: Deserialize<'de> + Ord> Deserialize<'de> for SortedSet<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SortedSet<T>, D::Error> {
        Ok(Vec::<T>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any mix of inserts and removes leaves the same entries, in the same order, as a
        /// `BTreeSet` given the same operations, with the same answers on the way.
        #[test]
        fn behaves_as_a_btree_set(ops in prop::collection::vec((any::<bool>(), 0u8..16), 0..200)) {
            let mut ours = SortedSet::default();
            let mut model = BTreeSet::new();
            for (add, v) in ops {
                if add {
                    prop_assert_eq!(ours.insert(v), model.insert(v));
                } else {
                    prop_assert_eq!(ours.remove(&v), model.remove(&v));
                }
                prop_assert_eq!(ours.contains(&v), model.contains(&v));
                prop_assert_eq!(ours.len(), model.len());
            }
            prop_assert!(ours.iter().eq(model.iter()));
        }

        /// The bytes are those of a `BTreeSet`, both ways; unsorted input with duplicates
        /// decodes as the set it names.
        #[test]
        fn encodes_as_a_btree_set(values in prop::collection::vec(any::<u32>(), 0..50)) {
            let cfg = bincode::config::standard();
            let ours: SortedSet<u32> = values.iter().copied().collect();
            let model: BTreeSet<u32> = values.iter().copied().collect();
            let a = bincode::serde::encode_to_vec(&ours, cfg).unwrap();
            let b = bincode::serde::encode_to_vec(&model, cfg).unwrap();
            prop_assert_eq!(&a, &b);
            let raw = bincode::serde::encode_to_vec(&values, cfg).unwrap();
            let (back, _): (SortedSet<u32>, usize) =
                bincode::serde::decode_from_slice(&raw, cfg).unwrap();
            prop_assert_eq!(back, ours);
        }
    }
}
