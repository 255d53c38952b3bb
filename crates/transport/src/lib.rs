//! kvfabric's transport: moving sealed blocks between nodes, verified on receipt.
//!
//! Will own the `Transport` trait and its QUIC (quinn, mTLS), UCX and RDMA implementations
//! (issue 3). Nothing is implemented in this commit.
