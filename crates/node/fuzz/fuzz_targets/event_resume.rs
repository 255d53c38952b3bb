//! GET /v1/events' since/scope query and Last-Event-ID: see `kvfabric_node::fuzzing::event_resume` for the properties.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kvfabric_node::fuzzing::event_resume(data));
