//! `kvfabric certs --out DIR --nodes N`: a cluster CA and one certificate per node for the
//! mutual TLS of the block transport and the Raft network (files: `ca.pem`, `ca.key.pem`,
//! `nodeN.pem`, `nodeN.key.pem`; keys mode 0600), and the cluster's namespace secret
//! (`namespace-secret.toml`, mode 0600) if the directory holds none: an existing secret is
//! kept, since every block id of the cluster derives from it (rotate it with
//! `kvfabric secret`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use kvfabric_core::secret::{self, SECRET_FILE};

/// Arguments of `kvfabric certs`.
#[derive(Debug, Args)]
pub(crate) struct CertsArgs {
    /// Directory to write into (created if missing; certificate files of the same names are
    /// replaced, a namespace secret is kept).
    #[arg(long)]
    out: PathBuf,
    /// Nodes to issue certificates for: node1 … nodeN.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
}

/// Runs `kvfabric certs`.
pub(crate) fn run(a: CertsArgs) -> anyhow::Result<()> {
    let files = kvfabric_transport::generate_cluster(&a.out, a.nodes)
        .with_context(|| format!("writing certificates into {}", a.out.display()))?;
    println!("CA: {}", files.ca_cert.display());
    for n in &files.nodes {
        println!("{}: {} {}", n.name, n.cert.display(), n.key.display());
    }
    let path = a.out.join(SECRET_FILE);
    let (s, created) = secret::ensure(&path)?;
    println!(
        "namespace secret: {} (id {}, {})",
        path.display(),
        s.current.id(),
        if created { "new" } else { "kept" }
    );
    Ok(())
}
