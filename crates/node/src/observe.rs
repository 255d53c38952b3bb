//! Logging: `tracing` to stderr, filtered by `RUST_LOG` when set, else by the config's
//! `node.log_level`. Request logs carry structured fields (method, route, status, elapsed_us,
//! error); stdout is kept for what scripts read (the node prints its API address there).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (once per process).
pub(crate) fn init(default_filter: &str) {
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let (filter, bad_env) = match from_env.as_deref().map(EnvFilter::try_new) {
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (EnvFilter::new(default_filter), Some(e)),
        None => (EnvFilter::new(default_filter), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some(e) = bad_env {
        tracing::warn!(error = %e, "RUST_LOG is not a valid filter; using node.log_level");
    }
}
