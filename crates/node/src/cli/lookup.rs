//! `kvfabric lookup`: which block each chunk key maps to, and who holds it.

use clap::Args;

use kvfabric_tools::client::{read_json, Client, ClientArgs};

/// Arguments of `kvfabric lookup`.
#[derive(Debug, Args)]
pub(crate) struct LookupArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Chunk keys (64 hex digits each).
    #[arg(required = true)]
    keys: Vec<String>,
}

/// Runs `kvfabric lookup`: prints the node's JSON answer.
pub(crate) fn run(a: LookupArgs) -> anyhow::Result<()> {
    let client = Client::new(&a.client)?;
    let body = serde_json::json!({ "keys": a.keys });
    let mut resp = client.post_json("/v1/lookup", &body)?;
    println!("{}", read_json(&mut resp)?);
    Ok(())
}
