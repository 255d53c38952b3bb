//! `kvfabric models`: the geometry presets with kind, layers, block tokens, block bytes and
//! per-region dtypes (embedded ones, or those of a models directory).

use std::path::PathBuf;

use clap::Args;

use kvfabric_core::presets::Catalog;

/// Arguments of `kvfabric models`.
#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    /// Read presets from this directory instead of the embedded ones.
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Print JSON (the shape of `GET /v1/models`).
    #[arg(long)]
    json: bool,
}

/// Runs `kvfabric models`.
pub(crate) fn run(a: ModelsArgs) -> anyhow::Result<()> {
    let catalog = match &a.models_dir {
        Some(d) => Catalog::from_dir(d)?,
        None => Catalog::builtin(),
    };
    let infos = catalog.infos();
    if a.json {
        println!("{}", serde_json::json!({ "models": infos }));
        return Ok(());
    }
    println!(
        "{:<18} {:<7} {:>6} {:>12} {:>12}  {:<9} DTYPES",
        "NAME", "KIND", "LAYERS", "BLOCK_TOKENS", "BLOCK_BYTES", "STORABLE"
    );
    for m in infos {
        let dtypes: Vec<String> = m.dtypes.iter().map(|(r, d)| format!("{r}={d}")).collect();
        println!(
            "{:<18} {:<7} {:>6} {:>12} {:>12}  {:<9} {}",
            m.name,
            m.kind,
            m.layers,
            m.block_tokens,
            m.block_bytes,
            if m.storable { "yes" } else { "no" },
            dtypes.join(" ")
        );
    }
    Ok(())
}
