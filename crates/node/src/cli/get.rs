//! `kvfabric get`: fetch one block's payload, rotated to a position if asked.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use kvfabric_tools::client::{read_body, Client, ClientArgs};

/// Arguments of `kvfabric get`.
#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Block id (64 hex digits).
    id: String,
    /// Rotate `k_rope` so the block's first token sits at this position.
    #[arg(long)]
    position: Option<u64>,
    /// Write the payload here (and a one-line summary to stdout); default: payload to stdout.
    #[arg(long, short)]
    out: Option<PathBuf>,
}

/// Runs `kvfabric get`.
pub(crate) fn run(a: GetArgs) -> anyhow::Result<()> {
    let client = Client::new(&a.client)?;
    let path = match a.position {
        Some(p) => format!("/v1/blocks/{}?position={p}", a.id),
        None => format!("/v1/blocks/{}", a.id),
    };
    let mut resp = client.get(&path)?;
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("?")
            .to_owned()
    };
    let (source, tier) = (header("kvfabric-source"), header("kvfabric-tier"));
    let payload = read_body(&mut resp)?;
    match &a.out {
        Some(file) => {
            std::fs::write(file, &payload)
                .with_context(|| format!("writing {}", file.display()))?;
            println!(
                "{}: {} bytes from {source} ({tier} tier) -> {}",
                a.id,
                payload.len(),
                file.display()
            );
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&payload).context("writing stdout")?;
            out.flush().context("writing stdout")?;
        }
    }
    Ok(())
}
