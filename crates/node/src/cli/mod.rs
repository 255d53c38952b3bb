//! The command tree (clap derive) and dispatch.
//!
//! ```text
//! kvfabric node   --config FILE                       run one node (store + HTTP API)
//! kvfabric put    [--node URL] [--token T] --model M [--tokens N] [--position P]
//!                 [--chunk-key K] [--chunk-key-independent K] [FILE|-]
//!                                                     seal one block, print the put response
//! kvfabric get    [--node URL] [--token T] ID [--position P] [--out FILE]
//! kvfabric lookup [--node URL] [--token T] KEY...     chunk keys → blocks and owners
//! kvfabric status [--node URL] [--token T] [--json]   members, tiers, readiness
//! kvfabric models [--models-dir DIR] [--json]         the geometry presets
//! kvfabric certs  --out DIR [--nodes N]               cluster CA, node certificates, the
//!                                                     namespace secret (kept if present)
//! kvfabric secret show|stage|promote|retire --file F  the namespace secret and its rotation
//! kvfabric cluster up [--nodes N] [--dir DIR]         start a local cluster of processes
//! kvfabric cluster down [--dir DIR]                   stop it
//! kvfabric demo [--agents N] [--docs N] [--seed S]    the multi-agent workload on 3 nodes
//! kvfabric bench directory [--records N] [--clients C] [--lookups L] [--skip-etcd]
//!                                                     directory vs etcd, ratio last
//! kvfabric engine-sim --node URL --listen ADDR [--model M] [--prefill-tokens-per-s R]
//!                                                     a stand-in engine over one node
//! kvfabric router --listen ADDR --backend NODE=URL... --node URL [--policy P]
//!                                                     route prompts to engines by score and load
//! kvfabric bench node [--blocks N] [--clients 1,2,4] [--rounds R] [--skip-cluster]
//!                                                     a node's HTTP API vs a bare HTTP server
//! kvfabric bench reuse [--agents N] [--docs N] [--seed S]
//!                                                     round-robin vs prefix vs kvfabric routing
//! kvfabric bench store [--blocks N] [--rounds R]      sealing vs blake3, disk tier vs file I/O
//! kvfabric bench transport [OPTIONS]                  QUIC (UCX) vs TCP between two processes
//! ```

mod certs;
mod get;
mod lookup;
mod models;
mod node;
mod put;
mod secret;
mod status;

use kvfabric_bench as bench;
use kvfabric_tools::{cluster, demo, engine_sim, router};

use clap::{Parser, Subcommand};

/// A distributed KV-cache fabric for LLM serving.
#[derive(Debug, Parser)]
#[command(name = "kvfabric", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one node: the tiered store and the HTTP API.
    Node(node::NodeArgs),
    /// Seal one block on a node and print the put response (JSON).
    Put(put::PutArgs),
    /// Fetch one block's payload from a node.
    Get(get::GetArgs),
    /// Look chunk keys up on a node (JSON).
    Lookup(lookup::LookupArgs),
    /// Show a node's view of the cluster: members, tiers, readiness.
    Status(status::StatusArgs),
    /// List the model geometry presets.
    Models(models::ModelsArgs),
    /// Write a cluster CA and per-node certificates for mTLS, and the namespace secret.
    Certs(certs::CertsArgs),
    /// Show or rotate the cluster's namespace secret.
    Secret(secret::SecretArgs),
    /// Start or stop a local cluster of node processes.
    Cluster(cluster::ClusterArgs),
    /// Run the multi-agent demo on a local 3-node cluster, print a report, stop the cluster.
    Demo(demo::DemoArgs),
    /// Benchmarks that print a ratio against a baseline measured in the same run.
    Bench(bench::BenchArgs),
    /// A stand-in LLM engine over one node: reads the blocks the fabric has, prefills the rest.
    EngineSim(engine_sim::EngineSimArgs),
    /// A reference router: forwards prompts to engines by route score and load.
    Router(router::RouterArgs),
}

/// Runs the parsed command.
pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Node(a) => node::run(a),
        Command::Put(a) => put::run(a),
        Command::Get(a) => get::run(a),
        Command::Lookup(a) => lookup::run(a),
        Command::Status(a) => status::run(a),
        Command::Models(a) => models::run(a),
        Command::Certs(a) => certs::run(a),
        Command::Secret(a) => secret::run(a),
        Command::Cluster(a) => cluster::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::EngineSim(a) => engine_sim::run(a),
        Command::Router(a) => router::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn client_commands_take_node_and_token() {
        let cli = Cli::try_parse_from([
            "kvfabric",
            "get",
            "--node",
            "http://127.0.0.1:1",
            "--token",
            "t",
            "ab",
        ])
        .unwrap();
        assert!(matches!(cli.command, Command::Get(_)));
        assert!(
            Cli::try_parse_from(["kvfabric", "node"]).is_err(),
            "--config is required"
        );
    }
}
