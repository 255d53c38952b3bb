//! The HTTP exchange behind `kvfabric.Client`: one request, the GIL released from the first
//! byte sent to the last byte read, the body sent from and read into Python buffers directly.
//!
//! Bounded: every call has a total time limit and a connection limit ([`Http::new`]), and a
//! body read into memory is capped by the caller's `body_max`; a body read into a buffer can
//! never exceed the buffer (a longer one is an error, not a truncation).

use std::io::Read;
use std::time::Duration;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ureq::http::{Request, Response};
use ureq::{Agent, Body};

use crate::buffers::RawBytes;
use crate::error::NativeError;
use crate::events::EventStream;

/// Most seconds a call may be given.
pub(crate) const TIMEOUT_S_MAX: f64 = 3600.0;
/// Seconds the benchmark's client may take to connect.
pub(crate) const CONNECT_TIMEOUT_S: f64 = 5.0;
/// ureq's socket buffers (its default is 128 KiB; blocks are megabytes).
const IO_BUFFER_BYTES: usize = 256 * 1024;

/// A keep-alive HTTP client of one node.
#[pyclass(frozen, module = "kvfabric._native")]
pub(crate) struct Http {
    agent: Agent,
    base: String,
    auth: Option<String>,
}

/// What a request returned: status, headers (lowercase names), the body when it was read into
/// memory, and the bytes written into the caller's buffer.
type Answer<'py> = (u16, Vec<(String, String)>, Option<Bound<'py, PyBytes>>, u64);

fn seconds(name: &str, v: f64) -> Result<Duration, NativeError> {
    if !(v > 0.0 && v <= TIMEOUT_S_MAX) {
        return Err(NativeError::Invalid(format!(
            "{name}: expected seconds in (0, {TIMEOUT_S_MAX}], found {v}"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

fn header_list(resp: &Response<Body>) -> Vec<(String, String)> {
    resp.headers()
        .iter()
        .filter_map(|(k, v)| {
            v.to_str()
                .ok()
                .map(|v| (k.as_str().to_owned(), v.to_owned()))
        })
        .collect()
}

/// Reads the whole body into `out`; errors if the body is longer than `out`.
fn read_into(body: Body, out: &mut [u8], doing: &str) -> Result<u64, NativeError> {
    let mut reader = body.into_with_config().limit(out.len() as u64 + 1).reader();
    let mut n = 0;
    while n < out.len() {
        match reader.read(&mut out[n..]) {
            Ok(0) => return Ok(n as u64),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(NativeError::from_io(doing, e)),
        }
    }
    let mut probe = [0u8; 1];
    match reader.read(&mut probe) {
        Ok(0) => Ok(n as u64),
        Ok(_) => Err(NativeError::Invalid(format!(
            "{doing}: the body is longer than the {} bytes of the buffer given",
            out.len()
        ))),
        Err(e) => Err(NativeError::from_io(doing, e)),
    }
}

fn read_bounded(body: Body, max: u64, doing: &str) -> Result<Vec<u8>, NativeError> {
    let mut v = Vec::new();
    body.into_with_config()
        .limit(max)
        .reader()
        .read_to_end(&mut v)
        .map_err(|e| NativeError::from_io(doing, e))?;
    Ok(v)
}

impl Http {
    /// A client of `base`: each call bounded by `timeout_s` in all, `connect_timeout_s` to
    /// connect.
    pub(crate) fn client(
        base: &str,
        token: Option<String>,
        timeout_s: f64,
        connect_timeout_s: f64,
    ) -> Result<Http, NativeError> {
        let base = base.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") {
            return Err(NativeError::Invalid(format!(
                "url: expected an http:// URL, found {:?}",
                base.chars().take(80).collect::<String>()
            )));
        }
        let timeout = seconds("timeout_s", timeout_s)?;
        let connect = seconds("connect_timeout_s", connect_timeout_s)?;
        let agent: Agent = kvfabric_http_client::agent(
            Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(timeout))
                .timeout_connect(Some(connect))
                .input_buffer_size(IO_BUFFER_BYTES)
                .output_buffer_size(IO_BUFFER_BYTES)
                .build(),
        );
        Ok(Http {
            agent,
            base,
            auth: token.map(|t| format!("Bearer {t}")),
        })
    }

    fn build(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
    ) -> Result<ureq::http::request::Builder, NativeError> {
        if !path.starts_with('/') {
            return Err(NativeError::Invalid(format!(
                "path: expected one starting with '/', found {:?}",
                path.chars().take(80).collect::<String>()
            )));
        }
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(a) = &self.auth {
            b = b.header("authorization", a);
        }
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        Ok(b)
    }

    /// Sends a request (with `body` if any), without the GIL.
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: Option<&[u8]>,
        events_read_timeout: Option<Duration>,
    ) -> Result<Response<Body>, NativeError> {
        let doing = format!("{method} {}{path}", self.base);
        let b = self.build(method, path, headers)?;
        let bad = |e: ureq::http::Error| NativeError::Invalid(format!("{doing}: {e}"));
        let result = match (body, events_read_timeout) {
            (Some(bytes), _) => self.agent.run(b.body(bytes).map_err(bad)?),
            (None, None) => self.agent.run(b.body(()).map_err(bad)?),
            (None, Some(idle)) => {
                // A stream: no total limit, a limit on each read instead.
                let req = self
                    .agent
                    .configure_request(b.body(()).map_err(bad)?)
                    .timeout_global(None)
                    .timeout_per_read(Some(idle))
                    .build();
                self.agent.run(req)
            }
        };
        result.map_err(|e| NativeError::from_ureq(&doing, e))
    }
}

#[pymethods]
impl Http {
    /// A client of the node at `base` (`http://HOST:PORT`), with `token` as its bearer token,
    /// each call bounded by `timeout_s` in all and `connect_timeout_s` to connect.
    #[new]
    #[pyo3(signature = (base, token = None, timeout_s = 60.0, connect_timeout_s = 5.0))]
    fn new(
        base: &str,
        token: Option<String>,
        timeout_s: f64,
        connect_timeout_s: f64,
    ) -> PyResult<Self> {
        Ok(Http::client(base, token, timeout_s, connect_timeout_s)?)
    }

    /// The base URL.
    #[getter]
    fn base(&self) -> &str {
        &self.base
    }

    /// One request. `body` (any C-contiguous buffer) is sent as is; a 2xx answer's body is read
    /// into `out` when given (a writable C-contiguous buffer), otherwise into memory, at most
    /// `body_max` bytes (a longer one is an error). Returns `(status, headers, body, written)`.
    #[pyo3(signature = (method, path, headers, body = None, out = None, body_max = 1 << 20))]
    #[allow(clippy::too_many_arguments)]
    fn request<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        path: &str,
        headers: Vec<(String, String)>,
        body: Option<PyBuffer<u8>>,
        out: Option<PyBuffer<u8>>,
        body_max: u64,
    ) -> PyResult<Answer<'py>> {
        let send = body
            .as_ref()
            .map(|b| RawBytes::of(b, false, "body"))
            .transpose()?;
        let into = out
            .as_ref()
            .map(|b| RawBytes::of(b, true, "out"))
            .transpose()?;
        let doing = format!("{method} {}{path}", self.base);
        let (status, hdrs, bytes, written) = py.detach(|| {
            // SAFETY: `body` and `out` (the PyBuffers) live until this function returns.
            let payload = send.map(|r| unsafe { r.slice() });
            let resp = self.send(method, path, &headers, payload, None)?;
            let status = resp.status().as_u16();
            let hdrs = header_list(&resp);
            let (_, body) = resp.into_parts();
            match into {
                Some(raw) if (200..300).contains(&status) && method != "HEAD" => {
                    // SAFETY: as above; `out` was checked writable and no other slice is live.
                    let n = read_into(body, unsafe { raw.slice_mut() }, &doing)?;
                    Ok::<_, NativeError>((status, hdrs, None, n))
                }
                _ if method == "HEAD" => Ok((status, hdrs, None, 0)),
                _ => Ok((status, hdrs, Some(read_bounded(body, body_max, &doing)?), 0)),
            }
        })?;
        drop((body, out));
        Ok((status, hdrs, bytes.map(|b| PyBytes::new(py, &b)), written))
    }

    /// Opens a Server-Sent Events stream (`GET path`). A 200 answer gives an [`EventStream`]
    /// whose every read may wait at most `read_timeout_s`; any other answer gives its body
    /// (at most `body_max` bytes). Returns `(status, body, stream)`.
    #[pyo3(signature = (path, headers, read_timeout_s = 30.0, body_max = 1 << 20))]
    fn open_events<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        headers: Vec<(String, String)>,
        read_timeout_s: f64,
        body_max: u64,
    ) -> PyResult<(u16, Option<Bound<'py, PyBytes>>, Option<EventStream>)> {
        let idle = seconds("read_timeout_s", read_timeout_s)?;
        let doing = format!("GET {}{path}", self.base);
        let (status, body, stream) = py.detach(|| {
            let resp = self.send("GET", path, &headers, None, Some(idle))?;
            let status = resp.status().as_u16();
            let (_, body) = resp.into_parts();
            if status == 200 {
                return Ok::<_, NativeError>((status, None, Some(EventStream::new(body))));
            }
            Ok((status, Some(read_bounded(body, body_max, &doing)?), None))
        })?;
        Ok((status, body.map(|b| PyBytes::new(py, &b)), stream))
    }
}
