//! `[route]`: the figures `POST /v1/route` prices a request with (see `crate::route`).
//!
//! ```toml
//! [route]                           # optional, every key optional
//! prefill_tokens_per_s = 8000       # how fast an engine recomputes: a miss recomputed costs
//!                                   # block_tokens / prefill_tokens_per_s seconds
//! default_bandwidth_gbps = 10       # Gbit/s from one node to another until a fetch between
//!                                   # them has been measured
//! gpu_read_gbps = 8000              # Gbit/s reading a hit back from the gpu tier (~free)
//! host_read_gbps = 80               # ... from the host tier (10 GB/s)
//! disk_read_gbps = 16               # ... from the disk tier (2 GB/s)
//! ```
//!
//! Every figure is a finite number within [`RATE_MIN`] to [`RATE_MAX`]; anything else is a
//! [`ConfigError`] naming `route.<key>`.

use kvfabric_store::ConfigError;

use kvfabric_core::config::{
    RouteConfig, DEFAULT_BANDWIDTH_GBPS_DEFAULT, DISK_READ_GBPS_DEFAULT, GPU_READ_GBPS_DEFAULT,
    HOST_READ_GBPS_DEFAULT, PREFILL_TOKENS_PER_S_DEFAULT,
};

use super::raw::RawRoute;
use super::validate::Check;

/// Smallest accepted rate (tokens per second or Gbit/s).
pub(crate) const RATE_MIN: f64 = 1e-6;
/// Largest accepted rate (tokens per second or Gbit/s).
pub(crate) const RATE_MAX: f64 = 1e12;

/// Validates `raw`, filling defaults.
pub(super) fn check(c: &Check<'_>, raw: &RawRoute) -> Result<RouteConfig, ConfigError> {
    let rate = |key: &str, v: Option<f64>, default: f64| match v {
        None => Ok(default),
        Some(x) if x.is_finite() && (RATE_MIN..=RATE_MAX).contains(&x) => Ok(x),
        Some(x) => Err(c.err(
            &format!("route.{key}"),
            format!("expected a number from {RATE_MIN} to {RATE_MAX}, found {x}"),
        )),
    };
    Ok(RouteConfig {
        prefill_tokens_per_s: rate(
            "prefill_tokens_per_s",
            raw.prefill_tokens_per_s,
            PREFILL_TOKENS_PER_S_DEFAULT,
        )?,
        default_bandwidth_gbps: rate(
            "default_bandwidth_gbps",
            raw.default_bandwidth_gbps,
            DEFAULT_BANDWIDTH_GBPS_DEFAULT,
        )?,
        gpu_read_gbps: rate("gpu_read_gbps", raw.gpu_read_gbps, GPU_READ_GBPS_DEFAULT)?,
        host_read_gbps: rate("host_read_gbps", raw.host_read_gbps, HOST_READ_GBPS_DEFAULT)?,
        disk_read_gbps: rate("disk_read_gbps", raw.disk_read_gbps, DISK_READ_GBPS_DEFAULT)?,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const BASE: &str = r#"
[node]
id = 1
http_listen = "127.0.0.1:0"
data_dir = "data"

[tiers]
host_bytes = "64 MiB"
"#;

    fn route(extra: &str) -> Result<RouteConfig, ConfigError> {
        let text = format!("{BASE}\n{extra}");
        super::super::parse("test.toml", Path::new("/tmp"), &text).map(|l| l.config.route)
    }

    #[test]
    fn defaults_fill_what_is_not_set_and_integers_are_accepted() {
        assert_eq!(route("").unwrap(), RouteConfig::default());
        let r = route("[route]\nprefill_tokens_per_s = 1000000\ndisk_read_gbps = 0.5\n").unwrap();
        assert_eq!(r.prefill_tokens_per_s, 1e6);
        assert_eq!(r.disk_read_gbps, 0.5);
        assert_eq!(r.host_read_gbps, HOST_READ_GBPS_DEFAULT);
    }

    #[test]
    fn the_shipped_configs_spell_out_the_defaults() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        for i in 1..=3 {
            let loaded = super::super::load(&dir.join(format!("node{i}.toml"))).unwrap();
            assert_eq!(loaded.config.route, RouteConfig::default());
        }
    }

    #[test]
    fn bad_figures_name_their_key() {
        for (text, key) in [
            (
                "[route]\nprefill_tokens_per_s = 0",
                "route.prefill_tokens_per_s",
            ),
            (
                "[route]\ndefault_bandwidth_gbps = -1",
                "route.default_bandwidth_gbps",
            ),
            ("[route]\nhost_read_gbps = nan", "route.host_read_gbps"),
            ("[route]\ngpu_read_gbps = inf", "route.gpu_read_gbps"),
            ("[route]\ndisk_read_gbps = 1e13", "route.disk_read_gbps"),
        ] {
            let e = route(text).unwrap_err();
            assert_eq!((e.file.as_str(), e.key.as_str()), ("test.toml", key), "{e}");
            assert!(e.reason.starts_with("expected a number"), "{e}");
        }
        let e = route("[route]\nspeed = 3").unwrap_err();
        assert!(e.to_string().contains("speed"), "{e}");
    }
}
