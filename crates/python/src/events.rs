//! A Server-Sent Events stream (`GET /v1/events`), read message by message without the GIL.
//!
//! Bounded: a line is at most [`LINE_BYTES_MAX`] bytes, a message at most
//! [`MESSAGE_BYTES_MAX`]; every read waits at most the stream's read timeout.

use std::io::{BufRead, BufReader, Read};
use std::sync::Mutex;

use pyo3::prelude::*;
use ureq::{Body, BodyReader};

use crate::error::NativeError;

/// Longest line of a stream.
pub(crate) const LINE_BYTES_MAX: usize = 1 << 20;
/// Longest message (all its lines).
pub(crate) const MESSAGE_BYTES_MAX: usize = 4 << 20;

/// One message: `(event, data, id)`; `data` joins the message's `data:` lines with `\n`.
type Message = (String, String, Option<String>);

/// An open event stream.
#[pyclass(module = "kvfabric._native")]
pub(crate) struct EventStream {
    reader: Mutex<Option<BufReader<BodyReader<'static>>>>,
}

impl EventStream {
    pub(crate) fn new(body: Body) -> EventStream {
        EventStream {
            reader: Mutex::new(Some(BufReader::new(body.into_reader()))),
        }
    }
}

fn read_line<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> Result<usize, NativeError> {
    line.clear();
    let n = Read::take(&mut *r, LINE_BYTES_MAX as u64 + 1)
        .read_until(b'\n', line)
        .map_err(|e| NativeError::from_io("reading the event stream", e))?;
    if line.len() > LINE_BYTES_MAX {
        return Err(NativeError::Transport(format!(
            "event stream: a line is longer than {LINE_BYTES_MAX} bytes"
        )));
    }
    Ok(n)
}

fn next_message(r: &mut impl BufRead) -> Result<Option<Message>, NativeError> {
    let (mut event, mut data, mut id) = (String::new(), Vec::<String>::new(), None);
    let (mut line, mut size, mut seen) = (Vec::new(), 0usize, false);
    loop {
        if read_line(r, &mut line)? == 0 {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            if seen {
                let event = if event.is_empty() {
                    "message".into()
                } else {
                    event
                };
                return Ok(Some((event, data.join("\n"), id)));
            }
            continue;
        }
        size += text.len();
        if size > MESSAGE_BYTES_MAX {
            return Err(NativeError::Transport(format!(
                "event stream: a message is longer than {MESSAGE_BYTES_MAX} bytes"
            )));
        }
        if text.starts_with(':') {
            continue;
        }
        seen = true;
        let (field, value) = text.split_once(':').unwrap_or((text, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        match field {
            "event" => event = value,
            "data" => data.push(value),
            "id" => id = Some(value),
            _ => {}
        }
    }
}

#[pymethods]
impl EventStream {
    /// The next message, or `None` when the stream ended (it is then closed).
    fn next_message(&self, py: Python<'_>) -> PyResult<Option<Message>> {
        let got = py.detach(|| {
            let mut guard = self.reader.lock().unwrap_or_else(|p| p.into_inner());
            let Some(r) = guard.as_mut() else {
                return Ok(None);
            };
            let m = next_message(r);
            if !matches!(m, Ok(Some(_))) {
                *guard = None;
            }
            m
        })?;
        Ok(got)
    }

    /// Closes the stream (the connection is dropped).
    fn close(&self) {
        *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
