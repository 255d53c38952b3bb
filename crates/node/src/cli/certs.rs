//! `kvfabric certs --out DIR --nodes N`: a cluster CA and one certificate per node for the
//! mutual TLS of the block transport and the Raft network (files: `ca.pem`, `ca.key.pem`,
//! `nodeN.pem`, `nodeN.key.pem`; keys mode 0600), and the cluster's namespace secret
//! (`namespace-secret.toml`, mode 0600) if the directory holds none: an existing secret is
//! kept, since every block id of the cluster derives from it (rotate it with
//! `kvfabric secret`). `kvfabric certs --out DIR --add N`: one more node's certificate from
//! the CA already in `DIR` (a member added to a running cluster; the others' certificates
//! and the secret are left as they are).

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
    /// Issue only node N's certificate, from the CA already in `--out`.
    #[arg(long, value_name = "N", conflicts_with = "nodes")]
    add: Option<u64>,
}

/// Runs `kvfabric certs`.
pub(crate) fn run(a: CertsArgs) -> anyhow::Result<()> {
    if let Some(n) = a.add {
        anyhow::ensure!(n >= 1, "--add: expected a node id from 1, found {n}");
        let f = kvfabric_transport::ClusterCa::load(&a.out)
            .and_then(|ca| ca.issue_into(&a.out, &format!("node{n}")))
            .with_context(|| {
                format!(
                    "issuing node{n}'s certificate from the CA in {}",
                    a.out.display()
                )
            })?;
        println!("{}: {} {}", f.name, f.cert.display(), f.key.display());
        return Ok(());
    }
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
