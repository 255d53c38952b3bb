//! Transport benchmark: 4.5 MB blocks over loopback between two processes, in one run.
//!
//! `cargo bench -p kvfabric-transport --bench bench_transport [-- OPTIONS]`, the same as
//! `kvfabric bench transport [OPTIONS]`: both run [`kvfabric_transport::bench::run`], whose
//! docs list the phases and options. This executable is also the server process
//! (`--serve DIR`).

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    kvfabric_transport::bench::run(&args, &[])
}
