//! Chunk keys, namespace keys and block ids, by the store's own functions.
//!
//! [`chunk_keys_with_extras`] is the prefix chain of `kvfabric_store::chunk` with one
//! addition for engines whose prefix cache keys more than tokens (vLLM's LoRA adapter,
//! cache salt, multimodal items): where chunk `i` carries extra keys `e_i` (bytes the caller
//! encodes canonically), the parent that chunk's key is chained from is replaced by
//!
//! ```text
//! parent'_i = blake3::derive_key(EXTRAS_CONTEXT, parent_i ‖ e_i)
//! ```
//!
//! (`parent_0` is 32 zero bytes). A chunk with no extra keys chains exactly as
//! `chunk_keys(.., Prefix, ..)`, so a request without any gets the keys every router computes
//! from its tokens; a difference in any chunk's extra keys changes that key and every one
//! after it, as a difference in tokens does.

use kvfabric_store::block::BlockHeader;
use kvfabric_store::chunk::{chunk_key, chunk_keys as store_chunk_keys};
use kvfabric_store::{ChunkKey, ChunkMode, NamespaceKey};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffers::RawBytes;
use crate::error::NativeError;
use crate::presets::geometry;

/// Derivation context of a parent with extra keys folded in.
pub(crate) const EXTRAS_CONTEXT: &str = "kvfabric 2026-12 engine extra keys v1";

fn mode(name: &str) -> Result<ChunkMode, NativeError> {
    match name {
        "prefix" => Ok(ChunkMode::Prefix),
        "independent" => Ok(ChunkMode::Independent),
        other => Err(NativeError::Invalid(format!(
            "mode: expected `prefix` or `independent`, found {:?}",
            other.chars().take(40).collect::<String>()
        ))),
    }
}

fn list<'py>(py: Python<'py>, keys: &[ChunkKey]) -> Vec<Bound<'py, PyBytes>> {
    keys.iter().map(|k| PyBytes::new(py, &k.0)).collect()
}

/// The 32-byte public key of namespace `name`: what its chunk keys are keyed by (derived
/// from the name alone). Block ids are keyed by the node's key of the namespace, derived from
/// the cluster's secret (`GET /v1/namespaces`), never by this one.
#[pyfunction]
pub(crate) fn namespace_key<'py>(py: Python<'py>, name: &str) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &NamespaceKey::derive(name).0)
}

/// The keys of every whole chunk of `tokens` for preset `model`, in `mode`.
#[pyfunction]
#[pyo3(signature = (model, tokens, mode = "prefix", namespace = "default"))]
pub(crate) fn chunk_keys<'py>(
    py: Python<'py>,
    model: &str,
    tokens: Vec<u32>,
    mode: &str,
    namespace: &str,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let g = geometry(model)?;
    let m = self::mode(mode)?;
    let ns = NamespaceKey::derive(namespace);
    let keys = py.detach(|| store_chunk_keys(&ns, g, m, &tokens));
    Ok(list(py, &keys))
}

/// Prefix-chained keys with per-chunk extra keys folded into the chain (module docs).
/// `extras[i]` belongs to chunk `i`; it may be shorter than the chunk count (the rest have
/// none) but not longer.
#[pyfunction]
#[pyo3(signature = (model, tokens, extras, namespace = "default"))]
pub(crate) fn chunk_keys_with_extras<'py>(
    py: Python<'py>,
    model: &str,
    tokens: Vec<u32>,
    extras: Vec<Option<Vec<u8>>>,
    namespace: &str,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let g = geometry(model)?;
    let block = g.block_tokens() as usize;
    let chunks = tokens.len() / block;
    if extras.len() > chunks {
        return Err(NativeError::Invalid(format!(
            "extras: expected at most one entry per whole chunk ({chunks}), found {}",
            extras.len()
        ))
        .into());
    }
    let ns = NamespaceKey::derive(namespace);
    let fp = g.fingerprint();
    let keys = py.detach(|| {
        let mut parent = [0u8; 32];
        let mut out = Vec::with_capacity(chunks);
        for (i, chunk) in tokens.chunks_exact(block).enumerate() {
            if let Some(Some(e)) = extras.get(i) {
                let mut material = Vec::with_capacity(32 + e.len());
                material.extend_from_slice(&parent);
                material.extend_from_slice(e);
                parent = blake3::derive_key(EXTRAS_CONTEXT, &material);
            }
            let key = chunk_key(&ns, &fp, ChunkMode::Prefix, Some(&ChunkKey(parent)), chunk);
            parent = key.0;
            out.push(key);
        }
        out
    });
    Ok(list(py, &keys))
}

/// The block id a canonical `payload` of preset `model` gets under the 32-byte namespace
/// `key` (as `GET /v1/namespaces` lists it): `blake3_keyed(key, header ‖ payload)`, the header
/// being the one the store writes.
#[pyfunction]
pub(crate) fn block_id<'py>(
    py: Python<'py>,
    model: &str,
    payload: PyBuffer<u8>,
    key: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let key: [u8; 32] = key.try_into().map_err(|_| {
        NativeError::Invalid(format!(
            "key: expected a 32-byte namespace key, found {} bytes",
            key.len()
        ))
    })?;
    let g = geometry(model)?;
    let header = BlockHeader::for_geometry(g);
    let raw = RawBytes::of(&payload, false, "payload")?;
    if raw.len() as u64 != header.payload_len {
        return Err(NativeError::Invalid(format!(
            "payload: a `{}` block is {} bytes, found {}",
            g.name,
            header.payload_len,
            raw.len()
        ))
        .into());
    }
    let ns = NamespaceKey(key);
    let id = py.detach(|| {
        // SAFETY: `payload` is held until this function returns.
        let bytes = unsafe { raw.slice() };
        let mut h = blake3::Hasher::new_keyed(&ns.0);
        h.update(&header.encode());
        h.update(bytes);
        *h.finalize().as_bytes()
    });
    drop(payload);
    Ok(PyBytes::new(py, &id))
}
