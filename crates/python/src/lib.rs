//! `kvfabric._native`: the native half of the `kvfabric` Python package.
//!
//! Owns what Python must not reimplement: chunk keys (both modes, and the prefix chain with an
//! engine's extra keys folded in), model fingerprints, the presets with their block layouts
//! and block ids, all computed by `kvfabric-store`'s own code (the node's); and the HTTP I/O of
//! `kvfabric.Client`, done here with the GIL released, reading straight into a caller's
//! buffer ([`http`]). `bench` drives the node's HTTP API from Rust alone, the baseline the
//! Python client is measured against.
//!
//! Must never: keep a pointer into a Python buffer past the call that received it; hold the
//! GIL across network I/O; accept an unbounded response.

mod bench;
mod buffers;
mod error;
mod events;
mod http;
mod keys;
mod presets;

use pyo3::prelude::*;

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(presets::models_json, m)?)?;
    m.add_function(wrap_pyfunction!(presets::fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(keys::namespace_key, m)?)?;
    m.add_function(wrap_pyfunction!(keys::chunk_keys, m)?)?;
    m.add_function(wrap_pyfunction!(keys::chunk_keys_with_extras, m)?)?;
    m.add_function(wrap_pyfunction!(keys::block_id, m)?)?;
    m.add_function(wrap_pyfunction!(bench::node_http_put_get, m)?)?;
    m.add_class::<http::Http>()?;
    m.add_class::<events::EventStream>()?;
    Ok(())
}
