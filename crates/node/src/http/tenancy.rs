//! Tenancy: the bearer token selects the caller's namespace; namespaces declared shared are
//! readable by every valid token and writable by the tokens given to them.
//!
//! Namespace keys derive from the cluster's namespace secret and the name
//! ([`NamespaceKey::from_secret`]), never from the name alone: a put uses the key of the
//! secret file's `current` secret, and reads, lookups and deletes try the keys of every
//! secret in it (a rotation in progress, see [`kvfabric_core::secret`]), current first.
//!
//! Tokens are compared by their blake3 digest (a map keyed by digest), so the time a lookup
//! takes says nothing about how much of a guessed token was right. With no tenants configured
//! the node is open: every request uses the namespace `default` and tokens are ignored.
//!
//! An optional `kvfabric-namespace: NAME` header narrows a request to one namespace; a name
//! the token may not use gets 403 whether or not such a namespace exists.

use std::collections::HashMap;

use axum::http::HeaderMap;
use kvfabric_core::secret::Secrets;
use kvfabric_store::NamespaceKey;

use super::errors::ApiError;
use crate::config::{NamespaceDecl, TenantDecl};
use kvfabric_core::OPEN_NAMESPACE;

/// Header naming the namespace a request targets.
pub(crate) const NAMESPACE_HEADER: &str = "kvfabric-namespace";

#[derive(Debug)]
struct Namespace {
    name: String,
    /// Under the current secret first, then every other readable one.
    keys: Vec<NamespaceKey>,
    shared: bool,
}

impl Namespace {
    fn new(name: &str, shared: bool, secrets: &Secrets) -> Namespace {
        Namespace {
            name: name.to_owned(),
            keys: secrets
                .readable()
                .iter()
                .map(|s| NamespaceKey::from_secret(s, name))
                .collect(),
            shared,
        }
    }

    /// The key puts use.
    fn current(&self) -> NamespaceKey {
        self.keys[0]
    }
}

/// One namespace as `GET /v1/namespaces` shows it to a caller that may read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamespaceView {
    /// Its name.
    pub(crate) name: String,
    /// Whether the caller may put into it.
    pub(crate) writable: bool,
    /// Declared shared.
    pub(crate) shared: bool,
    /// Its keys: the one puts use first, then the others a block may have been put under.
    pub(crate) keys: Vec<NamespaceKey>,
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
    /// From the validated config (an open node when `tenants` is empty), keyed by `secrets`.
    pub(crate) fn new(
        namespaces: &[NamespaceDecl],
        tenants: &[TenantDecl],
        secrets: &Secrets,
    ) -> Tenancy {
        if tenants.is_empty() {
            return Tenancy {
                namespaces: vec![Namespace::new(OPEN_NAMESPACE, false, secrets)],
                tokens: HashMap::new(),
            };
        }
        Tenancy {
            namespaces: namespaces
                .iter()
                .map(|n| Namespace::new(&n.name, n.shared, secrets))
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

    /// Every namespace key, under every readable secret (to re-hold blocks recovered from
    /// disk).
    pub(crate) fn keys(&self) -> Vec<NamespaceKey> {
        self.namespaces
            .iter()
            .flat_map(|n| n.keys.iter().copied())
            .collect()
    }

    /// The namespace an operator's request names by the `kvfabric-namespace` header (any
    /// declared one), else the first declared (an open node's only one), under the current secret.
    pub(crate) fn operator_namespace(&self, headers: &HeaderMap) -> Result<NamespaceKey, ApiError> {
        let invalid = |reason: String| ApiError::InvalidHeader {
            name: NAMESPACE_HEADER,
            reason,
        };
        let Some(v) = headers.get(NAMESPACE_HEADER) else {
            return Ok(self.namespaces[0].current());
        };
        let name = v
            .to_str()
            .map_err(|_| invalid("expected a namespace name in ASCII".into()))?;
        self.namespaces
            .iter()
            .find(|n| n.name == name)
            .map(Namespace::current)
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

    /// The token's own namespace under every readable secret (events show the engine's token
    /// ids of its blocks only).
    pub(crate) fn own_keys(&self) -> Vec<NamespaceKey> {
        self.tenancy.namespaces[self.own].keys.clone()
    }

    fn own_namespace(&self, headers: &HeaderMap) -> Result<&Namespace, ApiError> {
        let own = &self.tenancy.namespaces[self.own];
        match Self::named(headers)? {
            Some(name) if name != own.name => Err(ApiError::NamespaceForbidden("write")),
            _ => Ok(own),
        }
    }

    /// The namespace key a put goes to: the token's own, under the current secret.
    pub(crate) fn write(&self, headers: &HeaderMap) -> Result<NamespaceKey, ApiError> {
        Ok(self.own_namespace(headers)?.current())
    }

    /// The keys a delete may drop a block under: the token's own namespace under every
    /// readable secret, the current one first.
    pub(crate) fn delete_keys(&self, headers: &HeaderMap) -> Result<Vec<NamespaceKey>, ApiError> {
        Ok(self.own_namespace(headers)?.keys.clone())
    }

    fn readable(&self) -> impl Iterator<Item = (usize, &Namespace)> {
        let all = &self.tenancy.namespaces;
        std::iter::once((self.own, &all[self.own])).chain(
            all.iter()
                .enumerate()
                .filter(move |(i, n)| *i != self.own && n.shared),
        )
    }

    /// The namespace keys a read probes: the token's own namespace first, then every shared
    /// one; each under every readable secret, the current one first.
    pub(crate) fn read(&self, headers: &HeaderMap) -> Result<Vec<NamespaceKey>, ApiError> {
        match Self::named(headers)? {
            Some(name) => match self.readable().find(|(_, n)| n.name == name) {
                Some((_, n)) => Ok(n.keys.clone()),
                None => Err(ApiError::NamespaceForbidden("read")),
            },
            None => Ok(self
                .readable()
                .flat_map(|(_, n)| n.keys.iter().copied())
                .collect()),
        }
    }

    /// The namespaces this caller may read, its own first, with their keys (what a client
    /// needs to verify the ids of what it reads); narrowed to the one `kvfabric-namespace`
    /// names.
    pub(crate) fn views(&self, headers: &HeaderMap) -> Result<Vec<NamespaceView>, ApiError> {
        let named = Self::named(headers)?;
        let views: Vec<_> = self
            .readable()
            .filter(|(_, n)| named.is_none_or(|name| n.name == name))
            .map(|(i, n)| NamespaceView {
                name: n.name.clone(),
                writable: i == self.own,
                shared: n.shared,
                keys: n.keys.clone(),
            })
            .collect();
        if views.is_empty() {
            return Err(ApiError::NamespaceForbidden("read"));
        }
        Ok(views)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn secrets() -> Secrets {
        Secrets::parse(&format!("current = \"{}\"\n", "11".repeat(32))).unwrap()
    }

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
            &secrets(),
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
        let key = |name: &str| NamespaceKey::from_secret(&secrets().current, name);
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
        assert_eq!(a.views(&h).unwrap().len(), 1, "narrowed to docs");
        let all = headers(Some("Bearer token-a-0123456789"), None);
        assert_eq!(a.views(&all).unwrap().len(), 2, "own and shared, not b");
        assert!(matches!(a.write(&h), Err(ApiError::NamespaceForbidden(_))));
        let h = headers(Some("Bearer token-a-0123456789"), Some("no-such"));
        assert!(matches!(a.read(&h), Err(ApiError::NamespaceForbidden(_))));
    }

    #[test]
    fn an_open_node_ignores_tokens() {
        let t = Tenancy::new(&[], &[], &secrets());
        assert!(t.is_open());
        let h = headers(Some("Bearer whatever"), None);
        let c = t.caller(&h).unwrap();
        assert_eq!(
            c.write(&h).unwrap(),
            NamespaceKey::from_secret(&secrets().current, OPEN_NAMESPACE)
        );
        assert_ne!(c.write(&h).unwrap(), NamespaceKey::derive(OPEN_NAMESPACE));
        assert_eq!(t.keys().len(), 1);
    }

    #[test]
    fn during_a_rotation_puts_use_the_current_secret_and_reads_every_one() {
        let mut s = secrets();
        s.rotate(kvfabric_core::secret::Rotation::Stage).unwrap();
        s.rotate(kvfabric_core::secret::Rotation::Promote).unwrap();
        s.rotate(kvfabric_core::secret::Rotation::Stage).unwrap();
        let (new, staged, old) = (s.current, s.next.unwrap(), s.previous[0]);
        let ns = |name: &str, shared| NamespaceDecl {
            name: name.into(),
            shared,
        };
        let t = Tenancy::new(
            &[ns("a", false), ns("docs", true)],
            &[TenantDecl {
                token: "token-a-0123456789".into(),
                namespace: 0,
            }],
            &s,
        );
        let key = NamespaceKey::from_secret;
        let h = headers(Some("Bearer token-a-0123456789"), None);
        let a = t.caller(&h).unwrap();
        assert_eq!(a.write(&h).unwrap(), key(&new, "a"));
        assert_eq!(
            a.delete_keys(&h).unwrap(),
            vec![key(&new, "a"), key(&staged, "a"), key(&old, "a")]
        );
        assert_eq!(
            a.read(&h).unwrap(),
            vec![
                key(&new, "a"),
                key(&staged, "a"),
                key(&old, "a"),
                key(&new, "docs"),
                key(&staged, "docs"),
                key(&old, "docs"),
            ]
        );
        assert_eq!(t.keys().len(), 6);
        let views = a.views(&h).unwrap();
        assert_eq!(views.len(), 2);
        assert!(views[0].writable && !views[0].shared && views[0].name == "a");
        assert!(!views[1].writable && views[1].shared && views[1].name == "docs");
        assert_eq!(views[1].keys[0], key(&new, "docs"));
    }
}
