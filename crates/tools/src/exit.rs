//! Exit codes and the one-line failure reason every command prints on stderr.
//!
//! | code | meaning |
//! |---:|---|
//! | 0 | success |
//! | 1 | the command failed (a node answered with an error, I/O failed, the store refused) |
//! | 2 | usage error (clap) |
//! | 3 | a config file (node config or model preset) was rejected: file, key and reason |

use std::process::ExitCode;

use kvfabric_store::{ConfigError, StoreError};

/// The command failed.
pub const FAILURE: u8 = 1;
/// A config file was rejected.
pub const BAD_CONFIG: u8 = 3;

/// The exit code for an error: [`BAD_CONFIG`] when a config was rejected, else [`FAILURE`].
pub fn code_for(e: &anyhow::Error) -> ExitCode {
    let config = e.chain().any(|c| {
        c.downcast_ref::<ConfigError>().is_some()
            || matches!(c.downcast_ref::<StoreError>(), Some(StoreError::Config(_)))
    });
    ExitCode::from(if config { BAD_CONFIG } else { FAILURE })
}

/// The error and its causes on one line, `outer: inner: root`.
pub fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace(['\n', '\r'], "; ")
}
