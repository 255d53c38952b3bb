//! [`ApiError`]: every way the HTTP API refuses a request, with its status and its stable
//! snake_case code, rendered as `{"error": {"code": "...", "message": "..."}}`.
//!
//! 4xx for bad input, 5xx only for the node's own faults (a 5xx message never carries store
//! internals such as file paths: those go to the log). Every error response carries its code
//! in an [`ErrorCode`] response extension, which the request tracker counts by reason.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kvfabric_store::arena::ArenaError;
use kvfabric_store::StoreError;
use serde::Serialize;

use kvfabric_core::FabricError;

/// The code of an error response, for the metrics of rejected requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorCode(pub(crate) &'static str);

/// A refused request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// A required header is absent.
    #[error("missing header `{0}`")]
    MissingHeader(&'static str),
    /// A header is present but malformed.
    #[error("header `{name}`: {reason}")]
    InvalidHeader {
        /// The header.
        name: &'static str,
        /// What was expected and found.
        reason: String,
    },
    /// `kvfabric-model` names no preset this node has (400: the model is a request
    /// parameter, not the resource the path names).
    #[error("{0}")]
    UnknownModel(String),
    /// The model is an accounting-only (GQA) preset.
    #[error("{0}")]
    ModelNotStorable(String),
    /// `kvfabric-tokens` is not the model's block size.
    #[error("token count: expected {expected} (the model's block size), found {found}")]
    TokenCount {
        /// The model's block tokens.
        expected: u32,
        /// Tokens sent.
        found: u64,
    },
    /// The body is not the model's payload length.
    #[error("payload length: expected {expected} bytes, found {found}")]
    PayloadLength {
        /// The model's payload bytes.
        expected: u64,
        /// Bytes sent.
        found: u64,
    },
    /// A position beyond what the fabric rotates to.
    #[error("position {position} out of range (max {max})")]
    PositionOutOfRange {
        /// Position asked for.
        position: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A position asked of a model whose blocks hold RoPE dims that cannot be re-rotated
    /// (the message names the layer, the region and why).
    #[error("{0}")]
    PositionShiftUnsupported(String),
    /// An arena id that is not 32 hex digits.
    #[error("arena id: {0}")]
    InvalidArenaId(String),
    /// A layer in a path that is not a non-negative integer.
    #[error("layer: {0}")]
    InvalidLayer(String),
    /// A per-request arena refused (its status and code per [`ArenaError`] variant).
    #[error(transparent)]
    Arena(ArenaError),
    /// A block id that is not 64 hex digits.
    #[error("block id: {0}")]
    InvalidBlockId(String),
    /// A chunk key that is not 64 hex digits.
    #[error("chunk key {0}")]
    InvalidChunkKey(String),
    /// A query string the route does not accept.
    #[error("query: {0}")]
    InvalidQuery(String),
    /// A JSON body that does not parse into the route's request.
    #[error("request body: {0}")]
    InvalidJson(String),
    /// A lookup with more keys than the node's limit.
    #[error("lookup: expected at most {max} keys, found {found}")]
    TooManyKeys {
        /// `limits.max_lookup_keys`.
        max: u32,
        /// Keys sent.
        found: usize,
    },
    /// A route request whose model could not be inferred and was not named.
    #[error("{0}")]
    ModelRequired(String),
    /// A body larger than the node accepts.
    #[error("body too large: {0}")]
    BodyTooLarge(String),
    /// The body did not arrive within `limits.body_read_timeout_ms`.
    #[error("the body was not received within {0} ms")]
    BodyTimeout(u128),
    /// The body could not be read (the client aborted, bad chunked encoding).
    #[error("reading the body failed: {0}")]
    BodyRead(String),
    /// No bearer token, and the node has tenants.
    #[error("no bearer token: send `Authorization: Bearer TOKEN`")]
    MissingToken,
    /// A token that is malformed or not configured.
    #[error("the bearer token is not valid")]
    InvalidToken,
    /// The token may not use the namespace it asked for.
    #[error("this token may not {0} that namespace")]
    NamespaceForbidden(&'static str),
    /// An operator route asked with a tenant's token.
    #[error("operator routes need the operator's token ([operator] token), not a tenant's")]
    OperatorOnly,
    /// An operator route on a node with tenants and no operator token.
    #[error("this node has tenants and no [operator] token: its operator routes are off")]
    OperatorDisabled,
    /// No such block visible to the caller (the same answer whether it is absent or another
    /// tenant's).
    #[error("block not found")]
    NotFound,
    /// No such route.
    #[error("no route for this path")]
    RouteNotFound,
    /// The route exists but not with this method.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// Too many requests in flight.
    #[error("the node is at its limit of {0} requests in flight; retry")]
    Overloaded(u32),
    /// The store is still opening (recovering the disk tier).
    #[error("the node is not ready: its store is still opening")]
    NotReady,
    /// Fewer verified copies than the replication factor exist within the bound (the ones
    /// that exist, this node's included, stay).
    #[error("{have} of {want} verified copies of block {block} exist; the local copy stays")]
    ReplicationIncomplete {
        /// The block (hex).
        block: String,
        /// Copies that exist.
        have: u32,
        /// Copies asked for.
        want: u32,
    },
    /// The block's owners exist but none served it.
    #[error("{0}")]
    OwnersUnreachable(String),
    /// The directory could not record the block's ownership.
    #[error("the directory did not record the block: {0}")]
    DirectoryUnavailable(String),
    /// The store is open but the node has not taken its place in the cluster yet.
    #[error("the node is not ready: {0}")]
    ClusterNotReady(&'static str),
    /// Every tier is full of blocks the node holds.
    #[error("no room: {0}")]
    StoreFull(String),
    /// A stored block whose geometry is not among this node's presets (the models directory
    /// changed since it was sealed); it can be read canonically but not rotated.
    #[error("the block's geometry is not among this node's presets; read it without `position`")]
    UnknownGeometry,
    /// The node failed (details in its log).
    #[error("internal error (see the node's log)")]
    Internal,
    /// `GET /v1/events` from a sequence number no longer buffered.
    #[error("events from seq {since} of epoch {epoch} are no longer buffered; the oldest available is {oldest}")]
    ReplayGap {
        /// The sequence number asked for.
        since: u64,
        /// The oldest buffered one.
        oldest: u64,
        /// The node's current epoch.
        epoch: u64,
    },
    /// `GET /v1/events` beyond `events.max_sse_subscribers` open streams.
    #[error("the node is at its limit of {0} event streams; retry later")]
    TooManySubscribers(u32),
    /// `GET /v1/events?scope=cluster` on a node that runs no cluster feed.
    #[error("scope=cluster: expected a node with events.cluster_feed on, found it off here")]
    ClusterFeedOff,
    /// A membership change that is not allowed as asked.
    #[error("{0}")]
    MembershipRefused(String),
    /// A membership change that did not complete within its bound (what was done stays).
    #[error("{0}")]
    MembershipIncomplete(String),
}

impl ApiError {
    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            MissingHeader(_)
            | InvalidHeader { .. }
            | UnknownModel(_)
            | ModelNotStorable(_)
            | TokenCount { .. }
            | PayloadLength { .. }
            | PositionOutOfRange { .. }
            | InvalidBlockId(_)
            | InvalidChunkKey(_)
            | InvalidQuery(_)
            | InvalidJson(_)
            | TooManyKeys { .. }
            | ModelRequired(_)
            | PositionShiftUnsupported(_)
            | InvalidArenaId(_)
            | InvalidLayer(_)
            | ClusterFeedOff
            | BodyRead(_) => StatusCode::BAD_REQUEST,
            Arena(e) => arena_status(e),
            MissingToken | InvalidToken => StatusCode::UNAUTHORIZED,
            NamespaceForbidden(_) | OperatorOnly | OperatorDisabled => StatusCode::FORBIDDEN,
            NotFound | RouteNotFound => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Overloaded(_)
            | NotReady
            | ClusterNotReady(_)
            | ReplicationIncomplete { .. }
            | OwnersUnreachable(_)
            | DirectoryUnavailable(_)
            | TooManySubscribers(_)
            | MembershipIncomplete(_) => StatusCode::SERVICE_UNAVAILABLE,
            MembershipRefused(_) => StatusCode::CONFLICT,
            ReplayGap { .. } => StatusCode::GONE,
            StoreFull(_) => StatusCode::INSUFFICIENT_STORAGE,
            UnknownGeometry | Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable code clients match on.
    pub(crate) fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            MissingHeader(_) => "missing_header",
            InvalidHeader { .. } => "invalid_header",
            UnknownModel(_) => "unknown_model",
            ModelNotStorable(_) => "model_not_storable",
            TokenCount { .. } => "token_count",
            PayloadLength { .. } => "payload_length",
            PositionOutOfRange { .. } => "position_out_of_range",
            PositionShiftUnsupported(_) => "position_shift_unsupported",
            InvalidArenaId(_) => "invalid_arena_id",
            InvalidLayer(_) => "invalid_layer",
            Arena(e) => arena_code(e),
            InvalidBlockId(_) => "invalid_block_id",
            InvalidChunkKey(_) => "invalid_chunk_key",
            InvalidQuery(_) => "invalid_query",
            InvalidJson(_) => "invalid_json",
            TooManyKeys { .. } => "too_many_keys",
            ModelRequired(_) => "model_required",
            BodyTooLarge(_) => "body_too_large",
            BodyTimeout(_) => "body_timeout",
            BodyRead(_) => "body_read",
            MissingToken => "missing_token",
            InvalidToken => "invalid_token",
            NamespaceForbidden(_) => "namespace_forbidden",
            OperatorOnly => "operator_only",
            OperatorDisabled => "operator_disabled",
            NotFound => "not_found",
            RouteNotFound => "route_not_found",
            MethodNotAllowed => "method_not_allowed",
            Overloaded(_) => "overloaded",
            NotReady | ClusterNotReady(_) => "not_ready",
            ReplicationIncomplete { .. } => "replication_incomplete",
            DirectoryUnavailable(_) => "directory_unavailable",
            OwnersUnreachable(_) => "owners_unreachable",
            StoreFull(_) => "store_full",
            UnknownGeometry => "unknown_geometry",
            Internal => "internal",
            ReplayGap { .. } => "replay_gap",
            TooManySubscribers(_) => "too_many_subscribers",
            ClusterFeedOff => "cluster_feed_off",
            MembershipRefused(_) => "membership_refused",
            MembershipIncomplete(_) => "membership_incomplete",
        }
    }

    /// Maps a store error: bad input to its 4xx, a full store to 507, the rest to 500 (logged
    /// here with its details, which the response does not carry).
    pub(crate) fn from_store(e: StoreError) -> ApiError {
        match e {
            StoreError::UnknownModel { .. } => ApiError::UnknownModel(e.to_string()),
            StoreError::NotStorable { .. } => ApiError::ModelNotStorable(e.to_string()),
            StoreError::PayloadLength { expected, found } => {
                ApiError::PayloadLength { expected, found }
            }
            StoreError::TokenCount { expected, found } => ApiError::TokenCount { expected, found },
            StoreError::PositionOutOfRange { position, max } => {
                ApiError::PositionOutOfRange { position, max }
            }
            StoreError::PositionShiftUnsupported { .. } => {
                ApiError::PositionShiftUnsupported(e.to_string())
            }
            StoreError::Full { .. } | StoreError::TooLarge { .. } => {
                ApiError::StoreFull(e.to_string())
            }
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError::Internal
            }
        }
    }

    /// Maps a fabric error onto its status and code.
    pub(crate) fn from_fabric(e: FabricError) -> ApiError {
        match e {
            FabricError::Store(s) => ApiError::from_store(s),
            FabricError::Poisoned
            | FabricError::EpochFile { .. }
            | FabricError::SecretFile { .. }
            | FabricError::SecretRotation(_)
            | FabricError::InfoLog { .. }
            | FabricError::Random(_) => {
                tracing::error!(error = %e, "node failure");
                ApiError::Internal
            }
            FabricError::PayloadLength { expected, found } => {
                ApiError::PayloadLength { expected, found }
            }
            FabricError::NotFound => ApiError::NotFound,
            FabricError::DeleteForbidden => ApiError::NamespaceForbidden("delete from"),
            FabricError::ReplicationIncomplete { block, have, want } => {
                ApiError::ReplicationIncomplete {
                    block: block.to_hex(),
                    have,
                    want,
                }
            }
            FabricError::DirectoryUnavailable(m) => ApiError::DirectoryUnavailable(m),
            e @ FabricError::OwnersUnreachable { .. } => ApiError::OwnersUnreachable(e.to_string()),
            FabricError::UnknownGeometry => ApiError::UnknownGeometry,
            FabricError::ModelRequired(m) => ApiError::ModelRequired(m),
            FabricError::EngineBlock(e) => ApiError::InvalidHeader {
                name: "kvfabric-engine-*",
                reason: e.to_string(),
            },
            FabricError::MembershipRefused(m) => ApiError::MembershipRefused(m),
            FabricError::MembershipIncomplete(m) => ApiError::MembershipIncomplete(m),
            FabricError::Arena(e) => ApiError::Arena(e),
            FabricError::ArenaForbidden => ApiError::NamespaceForbidden("change arenas of"),
        }
    }
}

/// The status of an arena refusal: bad input 400, a request out of step with the arena's
/// state 409, the table at its bounds 507.
fn arena_status(e: &ArenaError) -> StatusCode {
    use ArenaError::*;
    match e {
        NotHybrid { .. }
        | UnknownLayer { .. }
        | RowLength { .. }
        | TokenLength { .. }
        | NoGroups { .. } => StatusCode::BAD_REQUEST,
        GroupNotDrained { .. } | GroupIncomplete { .. } => StatusCode::CONFLICT,
        UnknownArena(_) => StatusCode::NOT_FOUND,
        TooManyArenas { .. } | OverBudget { .. } => StatusCode::INSUFFICIENT_STORAGE,
    }
}

/// The stable code of an arena refusal.
fn arena_code(e: &ArenaError) -> &'static str {
    use ArenaError::*;
    match e {
        NotHybrid { .. } => "model_not_hybrid",
        UnknownLayer { .. } => "unknown_layer",
        RowLength { .. } | TokenLength { .. } => "payload_length",
        NoGroups { .. } => "no_groups",
        GroupNotDrained { .. } => "group_not_drained",
        GroupIncomplete { .. } => "group_incomplete",
        UnknownArena(_) => "not_found",
        TooManyArenas { .. } => "too_many_arenas",
        OverBudget { .. } => "arena_budget",
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        let body = serde_json::to_vec(&Body {
            error: Inner {
                code,
                message: self.to_string(),
            },
        })
        .expect("an error body always serialises");
        let mut resp = (self.status(), body).into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        match self {
            ApiError::MissingToken | ApiError::InvalidToken => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Overloaded(_)
            | ApiError::NotReady
            | ApiError::ClusterNotReady(_)
            | ApiError::TooManySubscribers(_) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        resp.extensions_mut().insert(ErrorCode(code));
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_4xx_and_node_faults_are_5xx() {
        let bad = [
            ApiError::UnknownModel("x".into()),
            ApiError::PayloadLength {
                expected: 1,
                found: 2,
            },
            ApiError::InvalidBlockId("x".into()),
            ApiError::BodyTooLarge("x".into()),
            ApiError::MissingToken,
            ApiError::NamespaceForbidden("read"),
            ApiError::NotFound,
        ];
        for e in bad {
            assert!(e.status().is_client_error(), "{e:?}");
        }
        assert!(ApiError::Internal.status().is_server_error());
        let full = ApiError::from_store(StoreError::Full {
            needed: kvfabric_store::ByteCount(1),
        });
        assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
    }

    #[test]
    fn the_body_is_the_documented_json() {
        let resp = ApiError::PayloadLength {
            expected: 10,
            found: 9,
        }
        .into_response();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            resp.extensions().get::<ErrorCode>().unwrap().0,
            "payload_length"
        );
    }
}
