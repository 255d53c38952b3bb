//! A disk tier's recovery from segment files: see `kvfabric_store::fuzzing::disk_recover`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_store::fuzzing::disk_recover::run(data));
