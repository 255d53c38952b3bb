//! Transport benchmark: 4.5 MB blocks between two processes on loopback and, as root, across
//! a veth pair between two network namespaces, in one run.
//!
//! `cargo bench -p kvfabric-transport --bench bench_transport [-- OPTIONS]`, the same as
//! `kvfabric bench transport [OPTIONS]`: both run [`kvfabric_transport::bench::run`], whose
//! docs list the phases, options and closing lines. This executable is also the server
//! process (`--serve DIR`) and the veth client process (`--veth-client DIR`).

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    kvfabric_transport::bench::run(&args, &[]).map(drop)
}
