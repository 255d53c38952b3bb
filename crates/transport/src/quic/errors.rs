//! Mapping quinn's errors onto [`TransportError`], and the application close codes this
//! protocol uses.

use quinn::{ConnectionError, ReadError, ReadExactError, VarInt, WriteError};

use crate::error::TransportError;
use crate::peer::PeerAddr;

/// Application close code: the peer violated the frame protocol.
pub const CLOSE_PROTOCOL_VIOLATION: VarInt = VarInt::from_u32(0x4b01);
/// Application close code: this transport is shutting down.
pub const CLOSE_SHUTDOWN: VarInt = VarInt::from_u32(0x4b02);
/// Application close code: evicted from the pool to make room (`connections_max`).
pub const CLOSE_EVICTED: VarInt = VarInt::from_u32(0x4b03);
/// Application close code: this server already has `connections_max` connections.
pub const CLOSE_BUSY: VarInt = VarInt::from_u32(0x4b04);

/// Stream reset code: the caller gave up on this push (timed out or cancelled) before its
/// answer; what it had not yet sent is dropped.
pub const STREAM_ABANDONED: VarInt = VarInt::from_u32(0x4b05);

/// TLS alerts travel as QUIC transport error codes 0x100..=0x1ff (RFC 9001 §4.8).
fn is_crypto_code(code: quinn::TransportErrorCode) -> bool {
    (0x100..=0x1ff).contains(&u64::from(code))
}

/// Whether this connection error is TLS refusing a certificate (either side).
pub fn is_handshake_refusal(e: &ConnectionError) -> bool {
    match e {
        ConnectionError::TransportError(t) => is_crypto_code(t.code),
        ConnectionError::ConnectionClosed(c) => is_crypto_code(c.error_code),
        _ => false,
    }
}

/// A connection-level failure with `peer`.
pub fn connection(peer: &PeerAddr, e: ConnectionError) -> TransportError {
    if is_handshake_refusal(&e) {
        return TransportError::Handshake {
            peer: peer.clone(),
            reason: e.to_string(),
        };
    }
    if matches!(e, ConnectionError::LocallyClosed) {
        return TransportError::Closed;
    }
    TransportError::ConnectionLost {
        peer: peer.clone(),
        reason: e.to_string(),
    }
}

/// A read failure on a block stream.
pub fn read(peer: &PeerAddr, e: ReadError) -> TransportError {
    match e {
        ReadError::ConnectionLost(c) => connection(peer, c),
        other => TransportError::ConnectionLost {
            peer: peer.clone(),
            reason: other.to_string(),
        },
    }
}

/// A read-exact failure that is not a short stream.
pub fn read_exact(peer: &PeerAddr, e: ReadExactError) -> TransportError {
    match e {
        ReadExactError::ReadError(r) => read(peer, r),
        ReadExactError::FinishedEarly(n) => TransportError::ConnectionLost {
            peer: peer.clone(),
            reason: format!("stream finished after {n} bytes"),
        },
    }
}

/// A write failure on a block stream.
pub fn write(peer: &PeerAddr, e: WriteError) -> TransportError {
    match e {
        WriteError::ConnectionLost(c) => connection(peer, c),
        other => TransportError::ConnectionLost {
            peer: peer.clone(),
            reason: other.to_string(),
        },
    }
}
