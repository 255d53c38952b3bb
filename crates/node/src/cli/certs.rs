//! `kvfabric certs --out DIR --nodes N`: a cluster CA and one certificate per node for the
//! mutual TLS of the block transport and the Raft network (files: `ca.pem`, `ca.key.pem`,
//! `nodeN.pem`, `nodeN.key.pem`; keys mode 0600).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Arguments of `kvfabric certs`.
#[derive(Debug, Args)]
pub(crate) struct CertsArgs {
    /// Directory to write into (created if missing; files of the same names are replaced).
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
    Ok(())
}
