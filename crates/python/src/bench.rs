//! The baseline of the client benchmark (`python -m kvfabric.bench`): the node's HTTP API
//! driven from Rust alone, no Python between requests. Same node, same blocks, same requests
//! (`PUT /v1/blocks`, `GET /v1/blocks/{id}`) as the Python client's rounds.

use std::io::Read;
use std::time::Instant;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::buffers::RawBytes;
use crate::error::NativeError;
use crate::http::{Http, CONNECT_TIMEOUT_S};

/// Most blocks one call takes.
pub(crate) const BLOCKS_MAX: usize = 4096;

fn put_all(
    http: &Http,
    model: &str,
    tokens: u32,
    blocks: &[&[u8]],
) -> Result<Vec<String>, NativeError> {
    let headers = [
        ("kvfabric-model".to_owned(), model.to_owned()),
        ("kvfabric-tokens".to_owned(), tokens.to_string()),
        (
            "content-type".to_owned(),
            "application/octet-stream".to_owned(),
        ),
    ];
    let mut ids = Vec::with_capacity(blocks.len());
    for b in blocks {
        let resp = http.send("PUT", "/v1/blocks", &headers, Some(b), None)?;
        let status = resp.status().as_u16();
        let mut text = String::new();
        resp.into_body()
            .into_with_config()
            .limit(1 << 16)
            .reader()
            .read_to_string(&mut text)
            .map_err(|e| NativeError::from_io("reading a put's answer", e))?;
        if status != 201 {
            return Err(NativeError::Transport(format!(
                "PUT /v1/blocks: expected 201, found {status}: {text}"
            )));
        }
        let id = text
            .split("\"block\":\"")
            .nth(1)
            .and_then(|s| s.get(..64))
            .ok_or_else(|| {
                NativeError::Transport(format!("PUT /v1/blocks: no block id in {text}"))
            })?;
        ids.push(id.to_owned());
    }
    Ok(ids)
}

fn get_all(http: &Http, ids: &[String], out: &mut [u8]) -> Result<(), NativeError> {
    for id in ids {
        let resp = http.send("GET", &format!("/v1/blocks/{id}"), &[], None, None)?;
        if resp.status().as_u16() != 200 {
            return Err(NativeError::Transport(format!(
                "GET /v1/blocks/{id}: expected 200, found {}",
                resp.status()
            )));
        }
        let mut r = resp
            .into_body()
            .into_with_config()
            .limit(out.len() as u64)
            .reader();
        r.read_exact(out)
            .map_err(|e| NativeError::from_io("reading a block", e))?;
    }
    Ok(())
}

/// `rounds` rounds of: put every block, then get every block back into one reused buffer.
/// Returns each round's `(put seconds, get seconds)`.
#[pyfunction]
#[pyo3(signature = (url, model, tokens, blocks, rounds, token = None))]
pub(crate) fn node_http_put_get(
    py: Python<'_>,
    url: &str,
    model: &str,
    tokens: u32,
    blocks: Vec<PyBuffer<u8>>,
    rounds: u32,
    token: Option<String>,
) -> PyResult<Vec<(f64, f64)>> {
    if blocks.is_empty() || blocks.len() > BLOCKS_MAX || rounds == 0 {
        return Err(NativeError::Invalid(format!(
            "expected 1 to {BLOCKS_MAX} blocks and at least one round, found {} blocks and {rounds} rounds",
            blocks.len()
        ))
        .into());
    }
    let http = Http::client(url, token, 120.0, CONNECT_TIMEOUT_S)?;
    let raws = blocks
        .iter()
        .map(|b| RawBytes::of(b, false, "blocks"))
        .collect::<Result<Vec<_>, _>>()?;
    let len = raws[0].len();
    let result = py.detach(|| {
        // SAFETY: every PyBuffer in `blocks` lives until this function returns.
        let slices: Vec<&[u8]> = raws.iter().map(|r| unsafe { r.slice() }).collect();
        let mut out = vec![0u8; len];
        let mut times = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            let t = Instant::now();
            let ids = put_all(&http, model, tokens, &slices)?;
            let put = t.elapsed().as_secs_f64();
            let t = Instant::now();
            get_all(&http, &ids, &mut out)?;
            times.push((put, t.elapsed().as_secs_f64()));
        }
        Ok::<_, NativeError>(times)
    });
    drop(blocks);
    Ok(result?)
}
