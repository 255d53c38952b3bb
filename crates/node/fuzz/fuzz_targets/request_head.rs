//! A put's and a read's request head (block id, read query, integer and chunk-key headers, bearer, engine metadata): see `kvfabric_node::fuzzing::request_head` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_node::fuzzing::request_head(data));
