//! `kvfabric status`: a node's view of the cluster (members, roles, tiers) and its readiness.

use clap::Args;

use kvfabric_tools::client::{read_json, Client, ClientArgs};

/// Arguments of `kvfabric status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Print the node's `GET /v1/cluster` answer as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `kvfabric status`.
pub(crate) fn run(a: StatusArgs) -> anyhow::Result<()> {
    let client = Client::new(&a.client)?;
    let mut resp = client.get("/v1/cluster")?;
    let cluster = read_json(&mut resp)?;
    if a.json {
        println!("{cluster}");
        return Ok(());
    }
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    println!(
        "leader {}  term {}",
        s(&cluster["leader"]),
        s(&cluster["term"])
    );
    println!(
        "{:<16} {:<28} {:<11} {:<8} tiers (used / capacity bytes)",
        "MEMBER", "API", "ROLE", "HEALTHY"
    );
    for m in cluster["members"].as_array().into_iter().flatten() {
        let tiers: Vec<String> = m["tiers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                format!(
                    "{} {} / {}",
                    s(&t["tier"]),
                    s(&t["used"]),
                    s(&t["capacity"])
                )
            })
            .collect();
        println!(
            "{:<16} {:<28} {:<11} {:<8} {}",
            s(&m["id"]),
            s(&m["api"]),
            s(&m["role"]),
            s(&m["healthy"]),
            tiers.join(", ")
        );
    }
    Ok(())
}
