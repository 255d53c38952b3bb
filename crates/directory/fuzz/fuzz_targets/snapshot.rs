//! Shard snapshots: see `kvfabric_directory::fuzzing::snapshot` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_directory::fuzzing::snapshot::run(data));
