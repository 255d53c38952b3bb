//! Length-prefixed, checksummed frames for the directory's RPCs, independent of what carries
//! them (the in-memory router in tests, a QUIC stream between processes).
//!
//! | offset | bytes | field                                                  |
//! |-------:|------:|--------------------------------------------------------|
//! |      0 |     4 | magic `KVFR`                                           |
//! |      4 |     2 | protocol version, u16 LE (= 1)                         |
//! |      6 |     1 | kind: 1 request, 2 response                            |
//! |      7 |     1 | reserved, 0                                            |
//! |      8 |     4 | body length, u32 LE                                    |
//! |     12 |     8 | first 8 bytes of blake3(body)                          |
//! |     20 |     … | body: bincode (standard config) of the message         |
//!
//! A receiver checks the header (magic, version, kind, reserved byte, length against its bound)
//! before it allocates or reads the body, and the checksum before it decodes it; bincode decodes
//! under the same length limit, so no declared length can make it allocate more.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::FRAME_BYTES_HARD_MAX;
use crate::error::DirectoryError;

/// Magic at the start of every frame.
pub const FRAME_MAGIC: [u8; 4] = *b"KVFR";
/// The protocol version this crate speaks.
pub const FRAME_VERSION: u16 = 1;
/// Length of the header in front of every body.
pub const FRAME_HEADER_LEN: usize = 4 + 2 + 1 + 1 + 4 + 8;

/// Which way a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// Caller → callee.
    Request = 1,
    /// Callee → caller.
    Response = 2,
}

fn bad(expected: impl Into<String>, found: impl ToString) -> DirectoryError {
    DirectoryError::BadFrame {
        expected: expected.into(),
        found: found.to_string(),
    }
}

fn checksum(body: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(&blake3::hash(body).as_bytes()[..8]);
    out
}

/// Encodes `msg` as one frame of at most `frame_bytes_max` bytes.
pub fn encode_frame<T: Serialize>(
    kind: FrameKind,
    msg: &T,
    frame_bytes_max: usize,
) -> Result<Vec<u8>, DirectoryError> {
    let mut out = vec![0u8; FRAME_HEADER_LEN];
    bincode::serde::encode_into_std_write(msg, &mut out, bincode::config::standard())
        .map_err(|e| bad("an encodable message", e))?;
    let limit = frame_bytes_max.min(FRAME_BYTES_HARD_MAX as usize);
    if out.len() > limit {
        return Err(DirectoryError::FrameTooLarge {
            limit,
            found: out.len(),
        });
    }
    let body_len = (out.len() - FRAME_HEADER_LEN) as u32;
    let sum = checksum(&out[FRAME_HEADER_LEN..]);
    out[..4].copy_from_slice(&FRAME_MAGIC);
    out[4..6].copy_from_slice(&FRAME_VERSION.to_le_bytes());
    out[6] = kind as u8;
    out[7] = 0;
    out[8..12].copy_from_slice(&body_len.to_le_bytes());
    out[12..20].copy_from_slice(&sum);
    Ok(out)
}

/// Checks a header; returns the body length it announces.
pub fn check_header(
    header: &[u8],
    kind: FrameKind,
    frame_bytes_max: usize,
) -> Result<usize, DirectoryError> {
    if header.len() < FRAME_HEADER_LEN {
        return Err(bad(
            format!("a header of {FRAME_HEADER_LEN} bytes"),
            format!("{} bytes", header.len()),
        ));
    }
    if header[..4] != FRAME_MAGIC {
        return Err(bad(
            format!("magic {FRAME_MAGIC:?}"),
            format!("{:?}", &header[..4]),
        ));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != FRAME_VERSION {
        return Err(bad(format!("version {FRAME_VERSION}"), version));
    }
    if header[6] != kind as u8 {
        return Err(bad(format!("kind {}", kind as u8), header[6]));
    }
    if header[7] != 0 {
        return Err(bad("reserved byte 0", header[7]));
    }
    let body_len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize;
    let limit = frame_bytes_max.min(FRAME_BYTES_HARD_MAX as usize);
    if FRAME_HEADER_LEN + body_len > limit {
        return Err(DirectoryError::FrameTooLarge {
            limit,
            found: FRAME_HEADER_LEN + body_len,
        });
    }
    Ok(body_len)
}

/// Checks and decodes one whole frame.
pub fn decode_frame<T: DeserializeOwned>(
    kind: FrameKind,
    frame: &[u8],
    frame_bytes_max: usize,
) -> Result<T, DirectoryError> {
    let body_len = check_header(frame, kind, frame_bytes_max)?;
    let body = &frame[FRAME_HEADER_LEN..];
    if body.len() != body_len {
        return Err(bad(
            format!("a body of {body_len} bytes"),
            format!("{} bytes", body.len()),
        ));
    }
    if frame[12..20] != checksum(body) {
        return Err(bad("a body matching its checksum", "a mismatch"));
    }
    // The limit binds bincode's own allocations to what the frame could hold.
    let config = bincode::config::standard().with_limit::<{ FRAME_BYTES_HARD_MAX as usize }>();
    let (msg, used) =
        crate::nesting::decode_from_slice(body, config).map_err(|e| bad("a decodable body", e))?;
    if used != body.len() {
        return Err(bad(
            format!("{} body bytes consumed", body.len()),
            format!("{used}"),
        ));
    }
    Ok(msg)
}

/// Reads one frame (header and body, checked) from a byte stream; the body is read only after
/// its length passed the bound.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    kind: FrameKind,
    frame_bytes_max: usize,
) -> Result<Vec<u8>, DirectoryError> {
    let mut frame = vec![0u8; FRAME_HEADER_LEN];
    reader
        .read_exact(&mut frame)
        .await
        .map_err(|e| bad("a frame header", e))?;
    let body_len = check_header(&frame, kind, frame_bytes_max)?;
    frame.resize(FRAME_HEADER_LEN + body_len, 0);
    reader
        .read_exact(&mut frame[FRAME_HEADER_LEN..])
        .await
        .map_err(|e| bad(format!("a body of {body_len} bytes"), e))?;
    Ok(frame)
}

/// Writes one encoded frame to a byte stream.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &[u8],
) -> Result<(), DirectoryError> {
    writer
        .write_all(frame)
        .await
        .map_err(|e| bad("a writable stream", e))?;
    writer
        .flush()
        .await
        .map_err(|e| bad("a writable stream", e))
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
