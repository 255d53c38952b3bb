//! `[arenas]`: the bounds of the per-request arenas of hybrid (DeepSeek-V4) models
//! (`POST /v1/arenas`; the sizing rule of one arena is `kvfabric_store::arena`'s).
//!
//! ```toml
//! [arenas]                          # optional, every key optional
//! arenas_max = 64                   # arenas live at once (507 `too_many_arenas` beyond)
//! bytes_max = "1 GiB"               # bytes all live arenas hold (507 `arena_budget` beyond)
//! ```
//!
//! `arenas_max` is 1 to [`ARENAS_MAX_CAP`]; `bytes_max` at least one arena of every hybrid
//! preset the node has (else that model could never get one) and at most [`BYTES_MAX_CAP`].
//! Anything else is a [`ConfigError`] naming `arenas.<key>`.

use kvfabric_core::presets::Catalog;
use kvfabric_store::arena::ArenaLimits;
use kvfabric_store::{ByteCount, ConfigError};

use super::raw::RawArenas;
use super::validate::Check;

/// Default `arenas_max`.
pub(crate) const ARENAS_MAX_DEFAULT: u32 = 64;
/// Largest accepted `arenas_max`.
pub(crate) const ARENAS_MAX_CAP: u32 = 65_536;
/// Default `bytes_max` (1 GiB: 156 V4-Pro arenas of 6,852,096 bytes).
pub(crate) const BYTES_MAX_DEFAULT: u64 = 1 << 30;
/// Largest accepted `bytes_max` (1 TiB).
pub(crate) const BYTES_MAX_CAP: u64 = 1 << 40;

/// Validates `raw` against the catalog's hybrid presets, filling defaults.
pub(super) fn check(
    c: &Check<'_>,
    raw: &RawArenas,
    catalog: &Catalog,
) -> Result<ArenaLimits, ConfigError> {
    let arenas_max = raw.arenas_max.unwrap_or(ARENAS_MAX_DEFAULT);
    if !(1..=ARENAS_MAX_CAP).contains(&arenas_max) {
        return Err(c.err(
            "arenas.arenas_max",
            format!("expected 1 to {ARENAS_MAX_CAP}, found {arenas_max}"),
        ));
    }
    let bytes_max = raw.bytes_max.map(|b| b.0).unwrap_or(BYTES_MAX_DEFAULT);
    if let Some((m, one)) = catalog.largest_arena() {
        if bytes_max < one.0 {
            return Err(c.err(
                "arenas.bytes_max",
                format!(
                    "expected at least one arena of `{}` ({} B), found {bytes_max} B",
                    m.geometry.name, one.0
                ),
            ));
        }
    }
    if bytes_max > BYTES_MAX_CAP {
        return Err(c.err(
            "arenas.bytes_max",
            format!("expected at most {BYTES_MAX_CAP} B, found {bytes_max} B"),
        ));
    }
    Ok(ArenaLimits {
        arenas_max,
        bytes_max: ByteCount(bytes_max),
    })
}
