//! RPC frames and the messages in them: see `kvfabric_directory::fuzzing::rpc_frame` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_directory::fuzzing::rpc_frame::run(data));
