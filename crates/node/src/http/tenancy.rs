//! Tenancy: the bearer token selects the caller's namespace; namespaces declared shared are
//! readable by every valid token and writable by the tokens given to them.
//!
//! Tokens are compared by their blake3 digest (a map keyed by digest), so the time a lookup
//! takes says nothing about how much of a guessed token was right. With no tenants configured
//! the node is open: every request uses the namespace `default` and tokens are ignored.
//!
//! An optional `kvfabric-namespace: NAME` header narrows a request to one namespace; a name
//! the token may not use gets 403 whether or not such a namespace exists.

use std::collections::HashMap;

use axum::http::HeaderMap;
use kvfabric_store::NamespaceKey;

use super::errors::ApiError;
use crate::config::{NamespaceDecl, TenantDecl};
use kvfabric_core::OPEN_NAMESPACE;

/// Header naming the namespace a request targets.
pub(crate) const NAMESPACE_HEADER: &str = "kvfabric-namespace";

#[derive(Debug)]
struct Namespace {
    name: String,
    key: NamespaceKey,
    shared: bool,
}

/// Who may use which namespace.
#[derive(Debug)]
pub(crate) struct Tenancy {
    namespaces: Vec<Namespace>,
    /// blake3(token) → index into `namespaces`; empty for an open node.
    tokens: HashMap<[u8; 32], usize>,
}

/// An authenticated caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    tenancy: &'a Tenancy,
    own: usize,
}

impl Tenancy {
    /// From the validated config (an open node when `tenants` is empty).
    pub(crate) fn new(namespaces: &[NamespaceDecl], tenants: &[TenantDecl]) -> Tenancy {
        if tenants.is_empty() {
            return Tenancy {
                namespaces: vec![Namespace {
                    name: OPEN_NAMESPACE.to_owned(),
                    key: NamespaceKey::derive(OPEN_NAMESPACE),
                    shared: false,
                }],
                tokens: HashMap::new(),
            };
        }
        Tenancy {
            namespaces: namespaces
                .iter()
                .map(|n| Namespace {
                    name: n.name.clone(),
                    key: NamespaceKey::derive(&n.name),
                    shared: n.shared,
                })
                .collect(),
            tokens: tenants
                .iter()
                .map(|t| (*blake3::hash(t.token.as_bytes()).as_bytes(), t.namespace))
                .collect(),
        }
    }

    /// Whether requests need a token.
    pub(crate) fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Every namespace key (to re-hold blocks recovered from disk).
    pub(crate) fn keys(&self) -> Vec<NamespaceKey> {
        self.namespaces.iter().map(|n| n.key).collect()
    }

    /// The namespace an operator's request names by the `kvfabric-namespace` header (any
    /// declared one), else the first declared (an open node's only one).
    pub(crate) fn operator_namespace(&self, headers: &HeaderMap) -> Result<NamespaceKey, ApiError> {
        let invalid = |reason: String| ApiError::InvalidHeader {
            name: NAMESPACE_HEADER,
            reason,
        };
        let Some(v) = headers.get(NAMESPACE_HEADER) else {
            return Ok(self.namespaces[0].key);
        };
        let name = v
            .to_str()
            .map_err(|_| invalid("expected a namespace name in ASCII".into()))?;
        self.namespaces
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.key)
            .ok_or_else(|| {
                invalid(format!(
                    "expected a declared namespace, found {:?}",
                    name.chars().take(40).collect::<String>()
                ))
            })
    }

    /// Authenticates a request by its `Authorization: Bearer` header.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Result<Caller<'_>, ApiError> {
        if self.is_open() {
            return Ok(Caller {
                tenancy: self,
                own: 0,
            });
        }
        let token = bearer(headers)?.ok_or(ApiError::MissingToken)?;
        let digest = blake3::hash(token.as_bytes());
        match self.tokens.get(digest.as_bytes()) {
            Some(&own) => Ok(Caller { tenancy: self, own }),
            None => Err(ApiError::InvalidToken),
        }
    }
}

/// The request's `Authorization: Bearer` token: `None` without the header, 401
/// `invalid_token` when it is not a bearer token.
pub(crate) fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .map(Some)
        .ok_or(ApiError::InvalidToken)
}

impl Caller<'_> {
    fn named(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
        match headers.get(NAMESPACE_HEADER) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(Some)
                .map_err(|_| ApiError::NamespaceForbidden("use")),
        }
    }

    /// The token's own namespace (what it writes; events show token ids of its blocks only).
    pub(crate) fn own(&self) -> NamespaceKey {
        self.tenancy.namespaces[self.own].key
    }

    /// The namespace a put or delete goes to: the token's own.
    pub(crate) fn write(&self, headers: &HeaderMap) -> Result<NamespaceKey, ApiError> {
        let own = &self.tenancy.namespaces[self.own];
        match Self::named(headers)? {
            Some(name) if name != own.name => Err(ApiError::NamespaceForbidden("write")),
            _ => Ok(own.key),
        }
    }

    /// The namespaces a read probes: the token's own first, then every shared one.
    pub(crate) fn read(&self, headers: &HeaderMap) -> Result<Vec<NamespaceKey>, ApiError> {
        let all = &self.tenancy.namespaces;
        let readable = |i: usize| i == self.own || all[i].shared;
        match Self::named(headers)? {
            Some(name) => match all.iter().position(|n| n.name == name) {
                Some(i) if readable(i) => Ok(vec![all[i].key]),
                _ => Err(ApiError::NamespaceForbidden("read")),
            },
            None => {
                let mut out = vec![all[self.own].key];
                out.extend(
                    (0..all.len())
                        .filter(|&i| i != self.own && all[i].shared)
                        .map(|i| all[i].key),
                );
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn tenancy() -> Tenancy {
        let ns = |name: &str, shared| NamespaceDecl {
            name: name.into(),
            shared,
        };
        Tenancy::new(
            &[ns("a", false), ns("b", false), ns("docs", true)],
            &[
                TenantDecl {
                    token: "token-a-0123456789".into(),
                    namespace: 0,
                },
                TenantDecl {
                    token: "token-b-0123456789".into(),
                    namespace: 1,
                },
            ],
        )
    }

    fn headers(token: Option<&str>, ns: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = token {
            h.insert("authorization", HeaderValue::from_str(t).unwrap());
        }
        if let Some(n) = ns {
            h.insert(NAMESPACE_HEADER, HeaderValue::from_str(n).unwrap());
        }
        h
    }

    #[test]
    fn tokens_select_namespaces_and_shared_ones_are_readable() {
        let t = tenancy();
        let key = NamespaceKey::derive;
        assert!(matches!(
            t.caller(&headers(None, None)),
            Err(ApiError::MissingToken)
        ));
        assert!(matches!(
            t.caller(&headers(Some("Bearer nope-nope-nope-nope"), None)),
            Err(ApiError::InvalidToken)
        ));
        assert!(matches!(
            t.caller(&headers(Some("Basic token-a-0123456789"), None)),
            Err(ApiError::InvalidToken)
        ));
        let h = headers(Some("bearer token-a-0123456789"), None);
        let a = t.caller(&h).unwrap();
        assert_eq!(a.write(&h).unwrap(), key("a"));
        assert_eq!(a.read(&h).unwrap(), vec![key("a"), key("docs")]);
        let h = headers(Some("Bearer token-a-0123456789"), Some("b"));
        assert!(matches!(a.read(&h), Err(ApiError::NamespaceForbidden(_))));
        assert!(matches!(a.write(&h), Err(ApiError::NamespaceForbidden(_))));
        let h = headers(Some("Bearer token-a-0123456789"), Some("docs"));
        assert_eq!(a.read(&h).unwrap(), vec![key("docs")]);
        assert!(matches!(a.write(&h), Err(ApiError::NamespaceForbidden(_))));
        let h = headers(Some("Bearer token-a-0123456789"), Some("no-such"));
        assert!(matches!(a.read(&h), Err(ApiError::NamespaceForbidden(_))));
    }

    #[test]
    fn an_open_node_ignores_tokens() {
        let t = Tenancy::new(&[], &[]);
        assert!(t.is_open());
        let h = headers(Some("Bearer whatever"), None);
        let c = t.caller(&h).unwrap();
        assert_eq!(c.write(&h).unwrap(), NamespaceKey::derive(OPEN_NAMESPACE));
        assert_eq!(t.keys().len(), 1);
    }
}
