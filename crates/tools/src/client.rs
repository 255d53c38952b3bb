//! The blocking HTTP client behind the one-shot commands (`put`, `get`, `lookup`, `status`).
//!
//! Every call is bounded in time ([`CALL_TIMEOUT`]) and in the bytes it reads back
//! ([`RESPONSE_BYTES_MAX`]). A 4xx or 5xx answer becomes an error carrying the node's JSON
//! error code and message, so the command exits non-zero with one line that says why.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use ureq::http::Response;
use ureq::Body;

/// Longest a single call may take, connection to last byte.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest response body a command reads (a DeepSeek-V4-Pro or Kimi K2 block fits easily).
pub const RESPONSE_BYTES_MAX: u64 = 256 << 20;

/// Where the node is and who is asking.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The node's HTTP API, e.g. http://127.0.0.1:7101.
    #[arg(long, env = "KVFABRIC_NODE", default_value = "http://127.0.0.1:7101")]
    pub node: String,
    /// Bearer token selecting the tenant namespace.
    #[arg(long, env = "KVFABRIC_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// A client of one node.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for `args.node`.
    pub fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        let base = args.node.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") {
            bail!(
                "--node: expected an http:// URL, found {:?}",
                args.node.chars().take(80).collect::<String>()
            );
        }
        let agent: ureq::Agent = kvfabric_http_client::agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(CALL_TIMEOUT))
                .build(),
        );
        Ok(Client {
            agent,
            base,
            token: args.token.clone(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// `GET path`; the response if it is a success.
    pub fn get(&self, path: &str) -> anyhow::Result<Response<Body>> {
        let mut req = self.agent.get(self.url(path));
        if let Some(a) = self.auth() {
            req = req.header("authorization", a);
        }
        let resp = req
            .call()
            .with_context(|| format!("GET {}", self.url(path)))?;
        checked("GET", &self.url(path), resp)
    }

    /// `HEAD path`: the status code, whatever it is, and `kvfabric-source` (`local` when
    /// the node holds the block itself, else the owner that does); only a failed connection
    /// is an error.
    pub fn head(&self, path: &str) -> anyhow::Result<(u16, Option<String>)> {
        let mut req = self.agent.head(self.url(path));
        if let Some(a) = self.auth() {
            req = req.header("authorization", a);
        }
        let resp = req
            .call()
            .with_context(|| format!("HEAD {}", self.url(path)))?;
        let source = resp
            .headers()
            .get("kvfabric-source")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok((resp.status().as_u16(), source))
    }

    /// `PUT path` with `body` and extra headers; the response if it is a success.
    pub fn put(
        &self,
        path: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> anyhow::Result<Response<Body>> {
        let mut req = self
            .agent
            .put(self.url(path))
            .header("content-type", "application/octet-stream");
        if let Some(a) = self.auth() {
            req = req.header("authorization", a);
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req
            .send(body)
            .with_context(|| format!("PUT {}", self.url(path)))?;
        checked("PUT", &self.url(path), resp)
    }

    /// `POST path` with a JSON body; the response if it is a success.
    pub fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<Response<Body>> {
        let mut req = self
            .agent
            .post(self.url(path))
            .header("content-type", "application/json");
        if let Some(a) = self.auth() {
            req = req.header("authorization", a);
        }
        let resp = req
            .send(serde_json::to_vec(body)?.as_slice())
            .with_context(|| format!("POST {}", self.url(path)))?;
        checked("POST", &self.url(path), resp)
    }
}

/// Reads a response body, bounded by [`RESPONSE_BYTES_MAX`].
pub fn read_body(resp: &mut Response<Body>) -> anyhow::Result<Vec<u8>> {
    resp.body_mut()
        .with_config()
        .limit(RESPONSE_BYTES_MAX)
        .read_to_vec()
        .context("reading the response body")
}

/// Reads a JSON response body.
pub fn read_json(resp: &mut Response<Body>) -> anyhow::Result<serde_json::Value> {
    let bytes = read_body(resp)?;
    serde_json::from_slice(&bytes).context("decoding the JSON response")
}

/// Turns a 4xx/5xx answer into an error naming the node's error code and message.
fn checked(method: &str, url: &str, mut resp: Response<Body>) -> anyhow::Result<Response<Body>> {
    let status = resp.status().as_u16();
    if status < 400 {
        return Ok(resp);
    }
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_vec()
        .unwrap_or_default();
    let parsed: Option<(String, String)> = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            Some((
                e.get("code")?.as_str()?.to_owned(),
                e.get("message")?.as_str()?.to_owned(),
            ))
        });
    match parsed {
        Some((code, message)) => bail!("{method} {url}: {status} {code}: {message}"),
        None => bail!("{method} {url}: {status} (no JSON error body)"),
    }
}
