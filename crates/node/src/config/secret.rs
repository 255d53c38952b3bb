//! `node.namespace_secret`: where the node reads the cluster's namespace secret (the file of
//! [`kvfabric_core::secret`]), which every namespace key derives from.
//!
//! ```toml
//! [node]
//! namespace_secret = "certs/namespace-secret.toml"   # optional
//! ```
//!
//! Default: `certs_dir/namespace-secret.toml` on a cluster member (written by `kvfabric certs`
//! and `kvfabric cluster up`; with `generate_dev_certs = true` the first start writes it if
//! it is missing), `data_dir/namespace-secret.toml` on a standalone node (written there on
//! its first start: a standalone node is a cluster of one). A path given explicitly is never
//! created: the node refuses to start without it.

use std::path::{Path, PathBuf};

use kvfabric_core::secret::SECRET_FILE;
use kvfabric_store::ConfigError;

use super::validate::Check;
use super::ClusterConfig;

/// Where the secret comes from.
#[derive(Debug, Clone)]
pub(crate) struct SecretSource {
    /// The file.
    pub(crate) path: PathBuf,
    /// Whether a missing file is generated at start (the defaults of a standalone node and of
    /// a development cluster), rather than refused.
    pub(crate) create: bool,
}

/// Resolves `node.namespace_secret` against the rest of the config.
pub(crate) fn check(
    c: &Check<'_>,
    raw: Option<&Path>,
    data_dir: &Path,
    cluster: Option<&ClusterConfig>,
) -> Result<SecretSource, ConfigError> {
    match raw {
        Some(p) if p.as_os_str().is_empty() => Err(c.err(
            "node.namespace_secret",
            "expected a file, found an empty path",
        )),
        Some(p) => Ok(SecretSource {
            path: c.path(p),
            create: false,
        }),
        None => Ok(match cluster {
            Some(cl) => SecretSource {
                path: cl.certs_dir.join(SECRET_FILE),
                create: cl.generate_dev_certs,
            },
            None => SecretSource {
                path: data_dir.join(SECRET_FILE),
                create: true,
            },
        }),
    }
}
