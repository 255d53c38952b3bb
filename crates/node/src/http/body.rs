//! Reading request bodies within bounds: a byte limit and a deadline on every read.

use axum::body::Body;
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::errors::ApiError;

/// The next data piece of `body` before `deadline`; `None` at its end. Trailers are skipped.
pub(crate) async fn next_piece(
    body: &mut Body,
    deadline: Instant,
    timeout_ms: u128,
) -> Result<Option<bytes::Bytes>, ApiError> {
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(ApiError::BodyTimeout(timeout_ms)),
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => return Err(ApiError::BodyRead(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            return Ok(Some(data));
        }
    }
}

/// The whole body, refused with 413 past `max_bytes` (without reading further).
pub(crate) async fn read_bounded(
    mut body: Body,
    max_bytes: u64,
    deadline: Instant,
    timeout_ms: u128,
) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    while let Some(piece) = next_piece(&mut body, deadline, timeout_ms).await? {
        if (out.len() + piece.len()) as u64 > max_bytes {
            return Err(ApiError::BodyTooLarge(format!(
                "expected at most {max_bytes} bytes, found more"
            )));
        }
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// Reads and discards the rest of a body that will be refused, so the client sees the answer
/// rather than a reset connection; returns its total length (`already` included). Stops with
/// 413 past `max_bytes`: beyond the limit nothing more is read.
pub(crate) async fn drain(
    mut body: Body,
    already: u64,
    max_bytes: u64,
    deadline: Instant,
    timeout_ms: u128,
) -> Result<u64, ApiError> {
    let mut total = already;
    loop {
        if total > max_bytes {
            return Err(ApiError::BodyTooLarge(format!(
                "expected at most {max_bytes} bytes, found more"
            )));
        }
        match next_piece(&mut body, deadline, timeout_ms).await? {
            Some(piece) => total += piece.len() as u64,
            None => return Ok(total),
        }
    }
}
