//! The ZeroMQ ROUTER's replay request: see `kvfabric_node::fuzzing::zmq_request` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_node::fuzzing::zmq_request(data));
