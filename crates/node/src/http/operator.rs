//! Who may use the operator routes (`/v1/operator/…`: the dashboard's feeds, membership
//! changes): the bearer of `[operator] token`, compared by blake3 digest like tenants'
//! tokens. A tenant's token is refused with 403 `operator_only`; a node with tenants and no
//! operator token refuses everyone (403 `operator_disabled`); an open node (no tenants) with
//! no operator token serves them to anyone, as it serves its data routes.

use axum::http::HeaderMap;

use super::errors::ApiError;
use super::tenancy::{bearer, Tenancy};
use crate::config::OperatorToken;

/// The operator check of one node.
#[derive(Debug)]
pub(crate) struct Operator {
    /// blake3 of the operator token, if configured.
    digest: Option<[u8; 32]>,
    /// The node has no tenants.
    open: bool,
}

impl Operator {
    /// From the config (`open`: the node declares no tenants).
    pub(crate) fn new(token: Option<&OperatorToken>, open: bool) -> Operator {
        Operator {
            digest: token.map(|t| *blake3::hash(t.0.as_bytes()).as_bytes()),
            open,
        }
    }

    /// Whether the request's bearer is the configured operator token.
    pub(crate) fn is_bearer(&self, headers: &HeaderMap) -> bool {
        let (Some(digest), Ok(Some(token))) = (&self.digest, bearer(headers)) else {
            return false;
        };
        blake3::hash(token.as_bytes()).as_bytes() == digest
    }

    /// `Ok` if the request's bearer is the operator (or the node is open and has no operator
    /// token).
    pub(crate) fn authorize(&self, headers: &HeaderMap, tenancy: &Tenancy) -> Result<(), ApiError> {
        let Some(digest) = &self.digest else {
            return if self.open {
                Ok(())
            } else {
                Err(ApiError::OperatorDisabled)
            };
        };
        let token = bearer(headers)?.ok_or(ApiError::MissingToken)?;
        if blake3::hash(token.as_bytes()).as_bytes() == digest {
            return Ok(());
        }
        if !self.open && tenancy.caller(headers).is_ok() {
            return Err(ApiError::OperatorOnly);
        }
        Err(ApiError::InvalidToken)
    }
}
