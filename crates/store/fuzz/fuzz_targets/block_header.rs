//! The 64-byte block header: see `kvfabric_store::fuzzing::block_header` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_store::fuzzing::block_header::run(data));
