//! `kvfabric put`: seal one block on a node and print the put response.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;

use kvfabric_tools::client::{read_json, Client, ClientArgs, RESPONSE_BYTES_MAX};

/// Arguments of `kvfabric put`.
#[derive(Debug, Args)]
pub(crate) struct PutArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Model preset of the block (see `kvfabric models`).
    #[arg(long)]
    model: String,
    /// Tokens in the block; defaults to the model's block size as the node reports it.
    #[arg(long)]
    tokens: Option<u64>,
    /// Position of the block's first token when `k_rope` is already rotated (the node
    /// un-rotates it); omit for a canonical (un-rotated) payload.
    #[arg(long)]
    position: Option<u64>,
    /// Chunk key (64 hex digits) to record for the block.
    #[arg(long)]
    chunk_key: Option<String>,
    /// Position-independent chunk key (64 hex digits) to record for the block as well.
    #[arg(long)]
    chunk_key_independent: Option<String>,
    /// Payload file (raw bytes in the model's block layout); `-` or nothing reads stdin.
    file: Option<PathBuf>,
}

/// Runs `kvfabric put`.
pub(crate) fn run(a: PutArgs) -> anyhow::Result<()> {
    let client = Client::new(&a.client)?;
    let payload = read_payload(a.file.as_ref())?;
    let tokens = match a.tokens {
        Some(t) => t,
        None => block_tokens(&client, &a.model)?,
    };
    let mut headers = vec![
        ("kvfabric-model", a.model.clone()),
        ("kvfabric-tokens", tokens.to_string()),
    ];
    if let Some(p) = a.position {
        headers.push(("kvfabric-position", p.to_string()));
    }
    if let Some(k) = &a.chunk_key {
        headers.push(("kvfabric-chunk-key", k.clone()));
    }
    if let Some(k) = &a.chunk_key_independent {
        headers.push(("kvfabric-chunk-key-independent", k.clone()));
    }
    let mut resp = client.put("/v1/blocks", &headers, &payload)?;
    println!("{}", read_json(&mut resp)?);
    Ok(())
}

fn read_payload(file: Option<&PathBuf>) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let read = match file {
        Some(p) if p.as_os_str() != "-" => std::fs::File::open(p)
            .with_context(|| format!("opening {}", p.display()))?
            .take(RESPONSE_BYTES_MAX + 1)
            .read_to_end(&mut out),
        _ => std::io::stdin()
            .lock()
            .take(RESPONSE_BYTES_MAX + 1)
            .read_to_end(&mut out),
    };
    read.context("reading the payload")?;
    if out.len() as u64 > RESPONSE_BYTES_MAX {
        bail!("payload: expected at most {RESPONSE_BYTES_MAX} bytes, found more");
    }
    Ok(out)
}

/// The model's block size as the node knows it (its presets may differ from the embedded ones).
fn block_tokens(client: &Client, model: &str) -> anyhow::Result<u64> {
    let mut resp = client.get("/v1/models")?;
    let v = read_json(&mut resp)?;
    let found = v
        .get("models")
        .and_then(|m| m.as_array())
        .and_then(|ms| {
            ms.iter()
                .find(|m| m.get("name").and_then(|n| n.as_str()) == Some(model))
        })
        .and_then(|m| m.get("block_tokens"))
        .and_then(|t| t.as_u64());
    match found {
        Some(t) => Ok(t),
        None => bail!("the node has no model `{model}` (see `kvfabric models` or GET /v1/models)"),
    }
}
