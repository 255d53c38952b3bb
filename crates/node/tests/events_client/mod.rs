//! A test client of `GET /v1/events`: opens the stream and parses Server-Sent Events.
#![allow(dead_code, unreachable_pub)]

pub mod node;
pub mod zmq;

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde_json::Value as Json;

/// Longest wait for one event on a stream (a loaded 2-core machine is slow).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// One SSE message.
#[derive(Debug, Clone)]
pub struct Msg {
    pub event: String,
    pub id: Option<String>,
    pub data: Json,
}

/// A client reading `GET /v1/events`.
pub struct Sse {
    lines: BufReader<Box<dyn Read + Send>>,
}

/// Opens `GET /v1/events{query}`; the status and, on 200, the stream, else the JSON body.
pub fn open(
    url: &str,
    token: Option<&str>,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, (u16, Json)> {
    open_at(url, "/v1/events", token, query, headers)
}

/// Opens the event stream at `path` (`/v1/events`, `/v1/operator/events`).
pub fn open_at(
    url: &str,
    path: &str,
    token: Option<&str>,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, (u16, Json)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(EVENT_TIMEOUT * 6))
        .build()
        .into();
    let mut r = agent.get(format!("{url}{path}{query}"));
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.call().expect("GET of the event stream");
    let status = resp.status().as_u16();
    if status != 200 {
        let body = resp.into_body().read_to_vec().unwrap();
        return Err((status, serde_json::from_slice(&body).unwrap()));
    }
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
    Ok(Sse {
        lines: BufReader::new(reader),
    })
}

impl Sse {
    /// The next message (keep-alive comments skipped).
    pub fn next(&mut self) -> Msg {
        let (mut event, mut id, mut data) = (String::new(), None, String::new());
        loop {
            let mut line = String::new();
            let n = self.lines.read_line(&mut line).expect("reading the stream");
            assert!(n > 0, "the stream ended");
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if data.is_empty() {
                    continue;
                }
                return Msg {
                    event,
                    id,
                    data: serde_json::from_str(&data).unwrap(),
                };
            }
            if line.starts_with(':') {
                continue;
            }
            let (k, v) = line.split_once(':').unwrap_or((line, ""));
            let v = v.strip_prefix(' ').unwrap_or(v);
            match k {
                "event" => event = v.to_owned(),
                "id" => id = Some(v.to_owned()),
                "data" => data += v,
                _ => {}
            }
        }
    }

    /// Whether the stream ends (EOF) before another message arrives.
    pub fn ends(&mut self) -> bool {
        loop {
            let mut line = String::new();
            match self.lines.read_line(&mut line) {
                Ok(0) | Err(_) => return true,
                Ok(_) if line.trim().is_empty() || line.starts_with(':') => continue,
                Ok(_) => return false,
            }
        }
    }

    /// The next `n` messages.
    pub fn take(&mut self, n: usize) -> Vec<Msg> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// The `blocks` of a `stored` or `removed` message.
pub fn blocks(m: &Msg) -> Vec<String> {
    m.data["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_owned())
        .collect()
}
