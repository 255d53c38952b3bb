//! One record of the Raft log's WAL: see `kvfabric_directory::fuzzing::wal_record` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_directory::fuzzing::wal_record::run(data));
