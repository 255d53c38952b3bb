//! `[operator]`: the token of the node's operator, who alone may see the dashboard and its
//! feeds (every tenant's events, every member's tiers and counters) and change the cluster's
//! membership.
//!
//! ```toml
//! [operator]                           # optional
//! token = "…"                          # bearer token, 16 to 256 visible ASCII characters,
//!                                      # different from every tenant's
//! ```
//!
//! Without `[operator]`, an open node (no `[[tenants]]`) serves the operator routes to anyone
//! (a development cluster, like its data routes), and a node with tenants refuses them
//! (403 `operator_disabled`): tenants never see each other through them.

use kvfabric_store::ConfigError;

use super::raw::RawOperator;
use super::validate::{Check, TOKEN_LEN_MAX, TOKEN_LEN_MIN};
use super::TenantDecl;

/// The operator's token, never printed.
#[derive(Clone)]
pub(crate) struct OperatorToken(pub(crate) String);

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorToken(…)")
    }
}

/// Validates `[operator]` against the tenants' tokens.
pub(crate) fn check(
    c: &Check<'_>,
    raw: Option<RawOperator>,
    tenants: &[TenantDecl],
) -> Result<Option<OperatorToken>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let t = raw.token;
    let visible = t.chars().all(|ch| ch.is_ascii_graphic());
    if !(TOKEN_LEN_MIN..=TOKEN_LEN_MAX).contains(&t.len()) || !visible {
        return Err(c.err(
            "operator.token",
            format!(
                "expected {TOKEN_LEN_MIN} to {TOKEN_LEN_MAX} visible ASCII characters, found {} characters",
                t.chars().count()
            ),
        ));
    }
    if tenants.iter().any(|tenant| tenant.token == t) {
        return Err(c.err(
            "operator.token",
            "expected a token of its own, found one a tenant has",
        ));
    }
    Ok(Some(OperatorToken(t)))
}
