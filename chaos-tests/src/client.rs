//! The HTTP client the workload and the checker use: puts of deterministic blocks with a
//! chunk key, gets, linearizable lookups, HEADs and cluster views, each outcome typed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::layout::{MODEL_NAME, MODEL_TOKENS};

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    /// `201` to a put.
    Put {
        /// The block id.
        block: String,
        /// Copies the node acknowledged.
        replicas: u32,
        /// The nodes that acknowledged holding a copy (the put's `holders`).
        #[serde(default)]
        holders: Vec<u64>,
    },
    /// `200` to a get.
    Got {
        /// Whether the bytes were the ones put under that id.
        bytes_match: bool,
        /// `kvfabric-source`.
        source: String,
    },
    /// `200` to a route: the nodes ranked, best first, and the best node's hits.
    Routed {
        /// Node ids, best first.
        nodes: Vec<String>,
        /// Hits of the first node.
        best_hits: u64,
    },
    /// `200` to a lookup.
    Looked {
        /// The block the key resolved to.
        block: Option<String>,
        /// Live owners listed.
        owners: Vec<String>,
    },
    /// `404`.
    NotFound,
    /// Another HTTP status, with its error code.
    Refused {
        /// The status.
        status: u16,
        /// `error.code` of the body.
        code: String,
    },
    /// No answer (connection refused or reset, timeout): the effect is unknown.
    NoAnswer {
        /// Why.
        error: String,
    },
}

/// Deterministic payload of block `seed` of the run's model: bf16 values in [-4, 4), all
/// finite (the shared test payloads).
pub fn payload(seed: u64) -> Vec<u8> {
    kvfabric_test_support::presets::payload(&kvfabric_test_support::presets::tiny(), seed)
}

/// A blocking HTTP client with a per-request bound.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

fn code_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

type Answer = Result<(u16, Vec<(String, String)>, Vec<u8>), String>;

fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
    let mut r = r.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let headers = r
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = r
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    Ok((status, headers, body))
}

impl Client {
    /// A client whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> Client {
        Client {
            agent: kvfabric_http_client::agent(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(timeout))
                    .build(),
            ),
        }
    }

    /// `PUT /v1/blocks` of block `seed` with chunk key `key`.
    pub fn put(&self, api: &str, seed: u64, key: &str) -> Outcome {
        let r = self
            .agent
            .put(format!("{api}/v1/blocks"))
            .header("kvfabric-model", MODEL_NAME)
            .header("kvfabric-tokens", MODEL_TOKENS.to_string())
            .header("kvfabric-chunk-key", key)
            .send(&payload(seed)[..]);
        match answer(r) {
            Ok((201, _, body)) => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let holders = v["holders"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|h| h.as_str()?.strip_prefix('n')?.parse().ok())
                            .collect()
                    })
                    .unwrap_or_default();
                Outcome::Put {
                    block: v["block"].as_str().unwrap_or("").to_owned(),
                    replicas: v["replicas"].as_u64().unwrap_or(0) as u32,
                    holders,
                }
            }
            Ok((status, _, body)) => Outcome::Refused {
                status,
                code: code_of(&body),
            },
            Err(error) => Outcome::NoAnswer { error },
        }
    }

    /// `GET /v1/blocks/{block}`, its bytes compared with block `seed`'s payload.
    pub fn get(&self, api: &str, block: &str, seed: u64) -> Outcome {
        match answer(self.agent.get(format!("{api}/v1/blocks/{block}")).call()) {
            Ok((200, headers, body)) => Outcome::Got {
                bytes_match: body == payload(seed),
                source: headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("kvfabric-source"))
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default(),
            },
            Ok((404, _, _)) => Outcome::NotFound,
            Ok((status, _, body)) => Outcome::Refused {
                status,
                code: code_of(&body),
            },
            Err(error) => Outcome::NoAnswer { error },
        }
    }

    /// `POST /v1/lookup?consistency=linearizable` of one chunk key.
    pub fn lookup(&self, api: &str, key: &str) -> Outcome {
        let body = serde_json::json!({ "keys": [key] }).to_string();
        let r = self
            .agent
            .post(format!("{api}/v1/lookup?consistency=linearizable"))
            .header("content-type", "application/json")
            .send(body.as_bytes());
        match answer(r) {
            Ok((200, _, body)) => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let res = &v["results"][0];
                let mut owners: Vec<String> = res["owners"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|o| o.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                owners.sort();
                Outcome::Looked {
                    block: res["block"].as_str().map(str::to_owned),
                    owners,
                }
            }
            Ok((status, _, body)) => Outcome::Refused {
                status,
                code: code_of(&body),
            },
            Err(error) => Outcome::NoAnswer { error },
        }
    }

    /// `POST /v1/route` of one chunk key (prefix mode, the harness's model).
    pub fn route(&self, api: &str, key: &str) -> Outcome {
        let body = serde_json::json!({ "keys": [key], "mode": "prefix", "model": MODEL_NAME });
        let r = self
            .agent
            .post(format!("{api}/v1/route"))
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes());
        match answer(r) {
            Ok((200, _, body)) => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let ranked = v["nodes"].as_array().cloned().unwrap_or_default();
                Outcome::Routed {
                    nodes: ranked
                        .iter()
                        .filter_map(|n| n["node"].as_str().map(str::to_owned))
                        .collect(),
                    best_hits: ranked.first().and_then(|n| n["hits"].as_u64()).unwrap_or(0),
                }
            }
            Ok((status, _, body)) => Outcome::Refused {
                status,
                code: code_of(&body),
            },
            Err(error) => Outcome::NoAnswer { error },
        }
    }

    /// Whether one node holds `block` itself: its HEAD answers 200 with `kvfabric-source:
    /// local` (a HEAD answers as a GET would: 200 naming another owner when it holds none).
    /// `None` without an answer.
    pub fn holds(&self, api: &str, block: &str) -> Option<bool> {
        let r = self
            .agent
            .head(format!("{api}/v1/blocks/{block}"))
            .call()
            .ok()?;
        let local = r
            .headers()
            .get("kvfabric-source")
            .is_some_and(|v| v == "local");
        Some(r.status() == 200 && local)
    }

    /// Whether one node holds `block` in memory (its HEAD answers 200, `kvfabric-source:
    /// local`, `kvfabric-tier: host` or `gpu`); `None` without an answer.
    pub fn in_memory(&self, api: &str, block: &str) -> Option<bool> {
        let r = self
            .agent
            .head(format!("{api}/v1/blocks/{block}"))
            .call()
            .ok()?;
        let h = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let local = h("kvfabric-source").as_deref() == Some("local");
        let memory = matches!(h("kvfabric-tier").as_deref(), Some("host" | "gpu"));
        Some(r.status() == 200 && local && memory)
    }

    /// `GET /v1/cluster`: the leader this node names (node id) and the term.
    pub fn leader(&self, api: &str) -> Option<(Option<u64>, u64)> {
        let v = self.cluster(api)?;
        Some((leader_named(&v), v["term"].as_u64()?))
    }

    /// `GET /v1/cluster` of `api`, when it answers 200 with JSON.
    fn cluster(&self, api: &str) -> Option<serde_json::Value> {
        let (status, _, body) = answer(self.agent.get(format!("{api}/v1/cluster")).call()).ok()?;
        if status != 200 {
            return None;
        }
        serde_json::from_slice(&body).ok()
    }

    /// The leader node `api` names and whether it takes every member for live (its
    /// directory lease current), from `GET /v1/cluster`.
    pub fn view(&self, api: &str) -> Option<(Option<u64>, bool)> {
        let v = self.cluster(api)?;
        let members = v["members"].as_array()?;
        let all_live = !members.is_empty() && members.iter().all(|m| m["healthy"] == true);
        Some((leader_named(&v), all_live))
    }

    /// `GET /v1/operator/directory` (the chaos nodes run without tenants, so the operator's
    /// routes are open): the last entry the node's directory replica applied and its digest.
    pub fn directory_digest(&self, api: &str) -> Option<(String, String)> {
        let (status, _, body) = answer(
            self.agent
                .get(format!("{api}/v1/operator/directory"))
                .call(),
        )
        .ok()?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
        Some((
            v["applied"].as_str()?.to_owned(),
            v["digest"].as_str()?.to_owned(),
        ))
    }

    /// `GET /metrics` of `api`: the text exposition, when it answers 200.
    pub fn metrics(&self, api: &str) -> Option<String> {
        let (status, _, body) = answer(self.agent.get(format!("{api}/metrics")).call()).ok()?;
        (status == 200).then(|| String::from_utf8_lossy(&body).into_owned())
    }

    /// Whether `/readyz` answers 200.
    pub fn ready(&self, api: &str) -> bool {
        matches!(
            answer(self.agent.get(format!("{api}/readyz")).call()),
            Ok((200, _, _))
        )
    }
}

/// The leader a `/v1/cluster` answer names (`"n2"`, or a bare number).
fn leader_named(v: &serde_json::Value) -> Option<u64> {
    v["leader"]
        .as_str()
        .map(|s| s.trim_start_matches('n'))
        .and_then(|s| s.parse().ok())
        .or_else(|| v["leader"].as_u64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::PAYLOAD_BYTES;

    #[test]
    fn payloads_are_deterministic_sized_and_finite() {
        let p = payload(5);
        assert_eq!(p.len(), PAYLOAD_BYTES);
        assert_eq!(p, payload(5));
        assert_ne!(p, payload(6));
        for c in p.chunks(2) {
            let bits = u32::from(u16::from_le_bytes([c[0], c[1]])) << 16;
            let v = f32::from_bits(bits);
            assert!(v.is_finite() && (-4.0..=4.0).contains(&v));
        }
    }
}
