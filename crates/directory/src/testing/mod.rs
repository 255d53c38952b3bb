//! An in-process cluster harness: several members on their stores (WAL + redb) in one folder, connected by
//! an [`InMemoryRouter`](crate::network::InMemoryRouter), sharing one
//! [`ManualClock`](crate::clock::ManualClock). Used by this crate's tests and meant for any test
//! that needs a directory without processes; it panics on misuse (asking for a member that is
//! not running), as test code may.

mod cluster;

pub use cluster::TestCluster;
