//! [`ByteSize`]: a byte quantity in a config, written as an integer (`1048576`) or as an
//! integer with a binary unit (`"64 MiB"`, `"1GiB"`; units B, KiB, MiB, GiB, TiB).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A number of bytes read from a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ByteSize(pub(crate) u64);

const UNITS: [(&str, u64); 5] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("B", 1),
];

impl ByteSize {
    /// Parses `"N"` or `"N UNIT"`.
    pub(crate) fn parse(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => (&t[..i], t[i..].trim()),
            None => (t, "B"),
        };
        let bad = || {
            format!(
                "expected bytes as an integer or a string like \"64 MiB\" (units B, KiB, MiB, GiB, TiB), found {:?}",
                s.chars().take(40).collect::<String>()
            )
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let (_, mult) = UNITS.iter().find(|(u, _)| *u == unit).ok_or_else(bad)?;
        n.checked_mul(*mult)
            .map(ByteSize)
            .ok_or_else(|| format!("{s:?} overflows 64 bits"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match UNITS
            .iter()
            .find(|(_, m)| *m > 1 && self.0 >= *m && self.0.is_multiple_of(*m))
        {
            Some((u, m)) => write!(f, "{} {u} ({} B)", self.0 / m, self.0),
            None => write!(f, "{} B", self.0),
        }
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes as an integer or a string like \"64 MiB\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| {
                    E::custom(format!("expected a non-negative byte count, found {v}"))
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_integers_and_binary_units() {
        assert_eq!(ByteSize::parse("4096"), Ok(ByteSize(4096)));
        assert_eq!(ByteSize::parse("64 MiB"), Ok(ByteSize(64 << 20)));
        assert_eq!(ByteSize::parse("1GiB"), Ok(ByteSize(1 << 30)));
        assert_eq!(ByteSize::parse("12 B"), Ok(ByteSize(12)));
        assert!(ByteSize::parse("1.5 GiB").is_err());
        assert!(ByteSize::parse("10 GB").is_err());
        assert!(ByteSize::parse("").is_err());
        assert!(ByteSize::parse("99999999999 TiB").is_err());
        assert_eq!(ByteSize(3 << 30).to_string(), "3 GiB (3221225472 B)");
    }
}
