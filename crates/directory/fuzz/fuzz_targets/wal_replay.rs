//! Opening a WAL from segment files: see `kvfabric_directory::fuzzing::wal_replay` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_directory::fuzzing::wal_replay::run(data));
