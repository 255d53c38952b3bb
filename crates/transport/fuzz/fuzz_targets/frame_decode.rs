//! The frame header and lease descriptor decoders: see `checks/frame_decode.rs` for the
//! properties.

#![no_main]

#[path = "../checks/frame_decode.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::run(data));
