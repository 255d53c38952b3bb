//! `kvfabric`: the node binary and its command line.
//!
//! Owns: composing the store, the directory and the transport into a node (`cluster`),
//! serving the HTTP API (`http`), the node config (`config`), the one-shot client commands and
//! the operator commands (`cli`).
//!
//! Must never: serve bytes that the store has not verified against the id asked for; let one
//! tenant read, look up or detect another tenant's blocks; hold the store lock across network
//! I/O; accept unbounded input (bodies, headers, connections, requests, keys are all capped).

mod cli;
mod cluster;
mod config;
mod http;
mod ids;
mod local;
mod observe;
mod presets;
mod route;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = cli::exit::code_for(&e);
            eprintln!("kvfabric: error: {}", cli::exit::one_line(&e));
            code
        }
    }
}
