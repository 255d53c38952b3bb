//! Properties of the node's decoders of network input, for the cargo-fuzz targets in
//! `crates/node/fuzz` and the stable replay of their corpora (`tests/fuzz_corpus.rs`); built
//! only with the `fuzzing` feature. Each function takes the fuzzer's bytes and panics when a
//! property fails:
//!
//! - [`request_head`]: a put's and a read's request head — the block id of the path, the read
//!   query string, `kvfabric-tokens`, `kvfabric-position`, the chunk-key headers,
//!   `content-length`, the bearer token and every `kvfabric-engine-*` header, checked against
//!   each embedded preset. Every refusal is a 4xx; what is accepted is canonical (ids and keys
//!   re-encode to the input in lower case, numbers to their decimal text, positions in bound)
//!   and an engine record carries what its headers said (page hashes as many as
//!   `kvfabric-engine-page-tokens` divides the block into).
//! - [`event_resume`]: `GET /v1/events`' query (`since`, `scope`) and `Last-Event-ID`, as a
//!   model of the contract says: a query is accepted exactly when each of at most one `since`
//!   (decimal `u64`) and one `scope` (`node` or `cluster`) is well formed; `Last-Event-ID` is
//!   used only without `since`, and is accepted exactly as `EPOCH:SEQ` of decimal `u64`s with
//!   an epoch not newer than the node's (older: from 0; this one: after SEQ).
//! - [`zmq_request`]: the ZeroMQ ROUTER's replay request: accepted exactly as
//!   `[peer, "", seq]` or `[peer, "", topic, seq]` with an 8-byte big-endian sequence number,
//!   and an accepted request's frames re-encode to themselves.
//!
//! The input is split into fields at `\n` (request head, event resume) or read as
//! length-prefixed frames (ZeroMQ), so that the fuzzer reaches each decoder's syntax.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Uri};
use bytes::Bytes;

use crate::http::engine_headers::{self, ALL as ENGINE_HEADERS};
use crate::http::errors::ApiError;
use crate::http::headers;
use crate::http::routes::events::{self, Scope, LAST_EVENT_ID};
use crate::http::tenancy::bearer;

/// The headers a request head input may set, picked by its lines' first byte.
const NAMES: [&str; 6] = [
    headers::TOKENS,
    headers::POSITION,
    headers::CHUNK_KEY,
    headers::CHUNK_KEY_INDEPENDENT,
    "content-length",
    "authorization",
];

fn refusal_is_4xx(e: &ApiError, what: &str) {
    let s = e.status().as_u16();
    assert!((400..500).contains(&s), "{what}: refused with {s} ({e:?})");
}

/// A header map from `lines`: `NAME: VALUE` where NAME is any of [`NAMES`] or an engine
/// header by its index (`#3: …`), else taken as written; invalid ones dropped.
fn header_map<'a>(lines: impl Iterator<Item = &'a [u8]>) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let name = match name {
            [b'#', i] => {
                let all: Vec<&str> = NAMES.iter().chain(ENGINE_HEADERS.iter()).copied().collect();
                all[usize::from(*i) % all.len()].as_bytes()
            }
            n => n,
        };
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            h.append(n, v);
        }
    }
    h
}

/// The request-head property (see the module docs). Input: path line, query line, then
/// header lines.
pub fn request_head(data: &[u8]) {
    let mut lines = data.split(|b| *b == b'\n');
    let path = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let query = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let h = header_map(lines);

    match headers::block_id(&path) {
        Ok(id) => {
            let raw = path.strip_prefix("/v1/blocks/").unwrap_or(&path);
            assert_eq!(id.to_hex(), raw.to_ascii_lowercase(), "block id re-encodes");
        }
        Err(e) => refusal_is_4xx(&e, "block id"),
    }
    match headers::read_query(Some(&query)) {
        Ok(q) => {
            assert!(q
                .position
                .is_none_or(|p| p <= kvfabric_store::rope::POSITION_MAX));
            let again = format!(
                "{}variant={}",
                q.position
                    .map_or(String::new(), |p| format!("position={p}&")),
                q.variant
            );
            assert_eq!(headers::read_query(Some(&again)).ok(), Some(q), "{again}");
        }
        Err(e) => refusal_is_4xx(&e, "read query"),
    }
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    for (name, parsed) in [
        (
            headers::TOKENS,
            headers::required_u64(&h, headers::TOKENS).map(Some),
        ),
        ("content-length", headers::content_length(&h)),
        (headers::POSITION, headers::position(&h)),
    ] {
        match parsed {
            Ok(Some(n)) => assert_eq!(text(name).map(str::trim).and_then(decimal), Some(n)),
            Ok(None) => assert!(h.get(name).is_none(), "{name} present but not read"),
            Err(e) => refusal_is_4xx(&e, name),
        }
    }
    for (name, parsed) in [
        (headers::CHUNK_KEY, headers::chunk_key(&h)),
        (
            headers::CHUNK_KEY_INDEPENDENT,
            headers::chunk_key_independent(&h),
        ),
    ] {
        match parsed {
            Ok(Some(k)) => assert_eq!(
                Some(k.to_hex()),
                text(name).map(str::to_ascii_lowercase),
                "{name} re-encodes"
            ),
            Ok(None) => assert!(h.get(name).is_none()),
            Err(e) => refusal_is_4xx(&e, name),
        }
    }
    match bearer(&h) {
        Ok(Some(t)) => assert!(text("authorization").is_some_and(|v| v.contains(t))),
        Ok(None) => assert!(h.get("authorization").is_none()),
        Err(e) => refusal_is_4xx(&e, "authorization"),
    }
    static CATALOG: std::sync::OnceLock<kvfabric_core::presets::Catalog> =
        std::sync::OnceLock::new();
    let catalog = CATALOG.get_or_init(kvfabric_core::presets::Catalog::builtin);
    for info in catalog.infos() {
        let model = catalog.lookup(&info.name).expect("a listed preset");
        match engine_headers::engine_block(&h, &model.geometry) {
            Ok(Some(b)) => {
                assert!(h.contains_key(engine_headers::ENGINE));
                assert_eq!(
                    text(engine_headers::ENGINE).map(str::trim),
                    Some(b.engine.as_str()),
                    "the engine as sent"
                );
                let tokens = model.geometry.block_tokens();
                assert!(b.page_tokens > 0 && tokens.is_multiple_of(b.page_tokens));
                assert_eq!(b.page_hashes.len() as u32, tokens / b.page_tokens);
                assert!(b.token_ids.is_empty() || b.token_ids.len() as u32 == tokens);
            }
            Ok(None) => assert!(ENGINE_HEADERS.iter().all(|n| !h.contains_key(*n))),
            Err(e) => refusal_is_4xx(&e, "engine headers"),
        }
    }
}

/// A decimal `u64` as the contract writes one (digits only).
fn decimal(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The event-resume property (see the module docs). Input: 8 bytes of the node's epoch
/// (big-endian, fewer: 0), the query line, then the `Last-Event-ID` value.
pub fn event_resume(data: &[u8]) {
    let (epoch, rest) = data.split_at(data.len().min(8));
    let mut e = [0u8; 8];
    e[..epoch.len()].copy_from_slice(epoch);
    let epoch = u64::from_be_bytes(e) >> 1;
    let mut parts = rest.splitn(2, |b| *b == b'\n');
    let query = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let last = parts.next();

    let Ok(uri) = format!("/v1/events?{query}").parse::<Uri>() else {
        return; // not a request line hyper would hand over
    };
    // The model, over the query the URI has (a `#` ends it: what follows is a fragment):
    // each pair `since=DECIMAL` or `scope=node|cluster`, each at most once.
    let query = uri.query().unwrap_or_default();
    let mut model = Some((None, None));
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        model = model.and_then(|(since, scope): (Option<u64>, Option<Scope>)| {
            match pair.split_once('=') {
                Some(("since", v)) if since.is_none() => Some((Some(decimal(v)?), scope)),
                Some(("scope", "node")) if scope.is_none() => Some((since, Some(Scope::Node))),
                Some(("scope", "cluster")) if scope.is_none() => {
                    Some((since, Some(Scope::Cluster)))
                }
                _ => None,
            }
        });
    }
    let parsed = events::query(&uri);
    let since = match (&parsed, model) {
        (Ok((since, scope)), Some((m_since, m_scope))) => {
            assert_eq!((*since, *scope), (m_since, m_scope.unwrap_or(Scope::Node)));
            *since
        }
        (Err(e), None) => {
            refusal_is_4xx(e, "events query");
            return;
        }
        (p, m) => panic!("query {query:?}: decoded {p:?}, the contract says {m:?}"),
    };

    let mut h = HeaderMap::new();
    if let Some(v) = last.and_then(|v| HeaderValue::from_bytes(v).ok()) {
        h.insert(LAST_EVENT_ID, v);
    }
    let model = match (since, h.get(LAST_EVENT_ID)) {
        (Some(s), _) => Some(Some(s)),
        (None, None) => Some(None),
        (None, Some(v)) => v
            .to_str()
            .ok()
            .and_then(|v| v.split_once(':'))
            .and_then(|(e, s)| Some((decimal(e)?, decimal(s)?)))
            .and_then(|(e, s)| match e.cmp(&epoch) {
                std::cmp::Ordering::Less => Some(Some(0)),
                std::cmp::Ordering::Equal => Some(Some(s.saturating_add(1))),
                std::cmp::Ordering::Greater => None,
            }),
    };
    match (events::start(epoch, &h, since), model) {
        (Ok(got), Some(want)) => assert_eq!(got, want, "resume point"),
        (Err(e), None) => refusal_is_4xx(&e, "Last-Event-ID"),
        (got, want) => panic!("Last-Event-ID {h:?} at epoch {epoch}: {got:?}, expected {want:?}"),
    }
}

/// The ZeroMQ replay request property (see the module docs). Input: frames, each a length
/// byte and that many bytes.
pub fn zmq_request(data: &[u8]) {
    let mut frames = Vec::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        frames.push(Bytes::copy_from_slice(&tail[..n]));
        rest = &tail[n..];
    }
    let shape_ok = matches!(frames.len(), 3 | 4)
        && frames[1].is_empty()
        && frames.last().is_some_and(|s| s.len() == 8);
    match crate::zmq::decode_request(&frames) {
        Some((topic, seq)) => {
            assert!(shape_ok, "accepted {frames:?}");
            let mut again = vec![frames[0].clone(), Bytes::new()];
            again.extend(topic.clone());
            again.push(Bytes::copy_from_slice(&seq.to_be_bytes()));
            assert_eq!(again, frames, "re-encodes to itself");
        }
        None => assert!(!shape_ok, "refused {frames:?}"),
    }
}
