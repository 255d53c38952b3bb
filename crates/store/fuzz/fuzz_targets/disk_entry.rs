//! The disk entry header: see `kvfabric_store::fuzzing::disk_entry` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_store::fuzzing::disk_entry::run(data));
