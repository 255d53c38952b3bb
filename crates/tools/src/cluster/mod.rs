//! `kvfabric cluster up|down|add|remove`: a local cluster of separate `kvfabric node`
//! processes, grown and shrunk while it runs ([`members`]).
//!
//! `up` writes everything into one directory ([`layout`]): certificates (`certs/`), the
//! operator token (`operator.token`, also in every config's `[operator]`), one config per node
//! (`nodeN.toml`), data directories (`nodeN/`), logs (`nodeN.log`) and pid files
//! (`nodeN.pid`); starts the nodes, waits until every `/readyz` answers 200 and prints each
//! node's API address and the dashboard's URL. `down` stops the processes its pid files name (SIGTERM, then
//! SIGKILL after a bound) and fails with a reason if one survives.

pub mod down;
pub mod layout;
pub mod members;
pub mod procs;
pub mod up;

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where `cluster up` and `down` keep their files unless told otherwise.
pub const DIR_DEFAULT: &str = "/tmp/kvfabric-cluster";

/// Arguments of `kvfabric cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Generate certificates and configs, start N node processes, wait until they are ready.
    Up(up::UpArgs),
    /// Stop the node processes of a cluster started by `up`.
    Down(DownArgs),
    /// Add a member to the running cluster: certificate, config, process, then a learner
    /// that catches up and becomes a voter.
    Add(members::AddArgs),
    /// Remove a member from the running cluster: a learner, drained (its blocks copied to
    /// the voters), out of the group, then its process stopped.
    Remove(members::RemoveArgs),
}

/// Arguments of `kvfabric cluster down`.
#[derive(Debug, Args)]
pub struct DownArgs {
    /// The directory `cluster up` used.
    #[arg(long, default_value = DIR_DEFAULT)]
    dir: PathBuf,
    /// Seconds to wait after SIGTERM before SIGKILL.
    #[arg(long, default_value_t = 10)]
    grace_s: u64,
}

/// Runs `kvfabric cluster …`.
pub fn run(a: ClusterArgs) -> anyhow::Result<()> {
    match a.command {
        ClusterCommand::Up(a) => up::run(a),
        ClusterCommand::Down(a) => down::run(&a.dir, a.grace_s),
        ClusterCommand::Add(a) => members::add(a),
        ClusterCommand::Remove(a) => members::remove(a),
    }
}
