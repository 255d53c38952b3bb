//! Decoding with bounded nesting: every bincode decode of bytes from a peer or the disk
//! (RPC frames, WAL records, snapshots) goes through [`decode_from_slice`].
//!
//! Some of the decoded types nest without bound: a merged command holds requests whose
//! commands may be merged again, a merged reply holds replies, and openraft's errors carry
//! `AnyError`s whose sources are `AnyError`s. Each level costs one byte of input but a stack
//! frame of the decoder, so a small frame could overflow the decoding thread's stack and abort
//! the process. A serde adapter counts the levels (sequences, maps, enums, options, newtypes)
//! and refuses input nested deeper than [`NESTING_DEPTH_MAX`], an error like any other decoding
//! error. Found by the `rpc_frame` fuzz target.

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, Visitor};

/// Deepest nesting accepted. Every message the directory sends nests far less (an append
/// request's deepest path is about 15 levels).
pub const NESTING_DEPTH_MAX: usize = 64;

/// `bincode::serde::decode_from_slice` with nesting bounded by [`NESTING_DEPTH_MAX`].
pub(crate) fn decode_from_slice<T: DeserializeOwned, C: bincode::config::Config>(
    bytes: &[u8],
    config: C,
) -> Result<(T, usize), bincode::error::DecodeError> {
    let seed = Inner {
        seed: std::marker::PhantomData::<T>,
        depth: NESTING_DEPTH_MAX,
    };
    bincode::serde::seed_decode_from_slice(seed, bytes, config)
}

/// A deserializer that lets `depth` more levels nest.
struct Limited<D> {
    inner: D,
    depth: usize,
}

/// A visitor, seed or access wrapped to pass the remaining depth on.
struct Wrap<V> {
    inner: V,
    depth: usize,
}

/// A seed whose value deserializes through [`Limited`].
struct Inner<S> {
    seed: S,
    depth: usize,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Inner<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Limited {
            inner: d,
            depth: self.depth,
        })
    }
}

/// One level deeper, or an error past the bound.
fn deeper<E: de::Error>(depth: usize) -> Result<usize, E> {
    depth.checked_sub(1).ok_or_else(|| {
        E::custom(format!(
            "nesting of at most {NESTING_DEPTH_MAX} levels expected, found more"
        ))
    })
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            let depth = self.depth;
            self.inner.$method($($arg,)* Wrap { inner: visitor, depth })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Limited<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any(), deserialize_bool(), deserialize_i8(), deserialize_i16(),
        deserialize_i32(), deserialize_i64(), deserialize_i128(), deserialize_u8(),
        deserialize_u16(), deserialize_u32(), deserialize_u64(), deserialize_u128(),
        deserialize_f32(), deserialize_f64(), deserialize_char(), deserialize_str(),
        deserialize_string(), deserialize_bytes(), deserialize_byte_buf(), deserialize_option(),
        deserialize_unit(), deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str), deserialize_seq(),
        deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize), deserialize_map(),
        deserialize_struct(name: &'static str, fields: &'static [&'static str]),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_identifier(), deserialize_ignored_any(),
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool), visit_i8(i8), visit_i16(i16), visit_i32(i32), visit_i64(i64),
        visit_i128(i128), visit_u8(u8), visit_u16(u16), visit_u32(u32), visit_u64(u64),
        visit_u128(u128), visit_f32(f32), visit_f64(f64), visit_char(char), visit_str(&str),
        visit_borrowed_str(&'de str), visit_string(String), visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]), visit_byte_buf(Vec<u8>),
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let depth = deeper(self.depth)?;
        self.inner.visit_some(Limited { inner: d, depth })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let depth = deeper(self.depth)?;
        self.inner.visit_newtype_struct(Limited { inner: d, depth })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        let depth = deeper(self.depth)?;
        self.inner.visit_seq(Wrap { inner: seq, depth })
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let depth = deeper(self.depth)?;
        self.inner.visit_map(Wrap { inner: map, depth })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        let depth = deeper(self.depth)?;
        self.inner.visit_enum(Wrap { inner: data, depth })
    }
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let depth = self.depth;
        self.inner.next_element_seed(Inner { seed, depth })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let depth = self.depth;
        self.inner.next_key_seed(Inner { seed, depth })
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        let depth = self.depth;
        self.inner.next_value_seed(Inner { seed, depth })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: de::EnumAccess<'de>> de::EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Wrap<A::Variant>), A::Error> {
        let depth = self.depth;
        let (value, variant) = self.inner.variant_seed(Inner { seed, depth })?;
        Ok((
            value,
            Wrap {
                inner: variant,
                depth,
            },
        ))
    }
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        let depth = self.depth;
        self.inner.newtype_variant_seed(Inner { seed, depth })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let depth = self.depth;
        self.inner.tuple_variant(
            len,
            Wrap {
                inner: visitor,
                depth,
            },
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let depth = self.depth;
        self.inner.struct_variant(
            fields,
            Wrap {
                inner: visitor,
                depth,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Request, RequestId};

    fn merged(levels: usize) -> Command {
        let mut c = Command::Join {
            node: crate::ids::NodeId(1),
            until_ms: 5,
        };
        for seq in 0..levels as u64 {
            c = Command::Merged(vec![Request {
                id: RequestId { client: 1, seq },
                command: c,
            }]);
        }
        c
    }

    #[test]
    fn nesting_within_the_bound_decodes_and_past_it_is_refused() {
        let config = bincode::config::standard();
        // A merge level nests an enum, a sequence and a struct: three levels each.
        let ok = merged(NESTING_DEPTH_MAX / 3 - 1);
        let bytes = bincode::serde::encode_to_vec(&ok, config).unwrap();
        let (back, used): (Command, usize) = decode_from_slice(&bytes, config).unwrap();
        assert_eq!((back, used), (ok, bytes.len()));
        let deep = merged(NESTING_DEPTH_MAX);
        let bytes = bincode::serde::encode_to_vec(&deep, config).unwrap();
        let err = decode_from_slice::<Command, _>(&bytes, config).unwrap_err();
        assert!(err.to_string().contains("nesting of at most"), "{err}");
    }

    #[test]
    fn a_frame_nested_far_past_any_stack_is_refused_not_a_crash() {
        // Merged(len 1, Request { client, seq, Merged(...) }) repeated: 4 bytes a level.
        let mut bytes = Vec::new();
        for _ in 0..1_000_000 {
            bytes.extend_from_slice(&[4, 1, 0, 0]);
        }
        let config = bincode::config::standard();
        assert!(decode_from_slice::<Command, _>(&bytes, config).is_err());
    }
}
