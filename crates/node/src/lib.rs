//! The `kvfabric` node and its command line, as a library: the binary (`main.rs`) calls
//! [`main_entry`]; the `fuzzing` feature exposes the properties of the node's decoders
//! ([`fuzzing`]) to its cargo-fuzz targets and their stable corpus replay.
//!
//! Owns: the node config (`config`), the HTTP API over the fabric core (`http`: each handler
//! maps HTTP to one `kvfabric_core::Fabric` call and its answer or error back), the ZeroMQ
//! publisher of the KV event stream (`zmq`), starting a node (`cli::node`) and the command
//! line, whose tools (`cluster`, `demo`, `router`, `engine-sim`) and benchmarks live in the
//! `kvfabric-tools` and `kvfabric-bench` crates.
//!
//! Must never: orchestrate the system in an HTTP handler (the core does); accept unbounded
//! input (bodies, headers, connections, requests, keys are all capped).

mod cli;
mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod http;
mod observe;
mod zmq;

use std::process::ExitCode;

use clap::Parser;

/// Parses the command line and runs it; the process's exit code.
pub fn main_entry() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = kvfabric_tools::exit::code_for(&e);
            eprintln!("kvfabric: error: {}", kvfabric_tools::exit::one_line(&e));
            code
        }
    }
}
