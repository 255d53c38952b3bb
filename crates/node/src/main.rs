//! The `kvfabric` binary.
fn main() {}
