//! Directory tests against real members in one process: their stores (WAL + redb) on temp dirs, the
//! in-memory router as the network, a manual clock for leases. Each cluster test runs in
//! phases announced with `tracing::info!` (RUST_LOG=info to follow them).

mod batching;
mod common;
mod failover;
mod lease_grace;
mod leases;
mod linearizable;
mod membership;
mod partition;
mod restart;
mod snapshot;
mod storage_suite;
