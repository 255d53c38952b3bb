//! kvfabric-router-compat: tests that real routers' own code consumes kvfabric's KV events
//! unchanged. No library code: the tests (`tests/`) start a real kvfabric cluster and feed
//! its cluster-wide ZeroMQ events through Dynamo's published `dynamo-kv-router` (its
//! `zmq_wire` decoder and converter into its radix-tree indexer).
//!
//! Must never: decode kvfabric's wire with code of its own (the point is the counterpart's
//! decoder), or be a dependency of anything that ships.
