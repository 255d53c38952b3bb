//! The wire frame header, as pure functions: no sockets, no clock (sans-IO).
//!
//! Owns the byte layout of the header that precedes every message on a block stream, its
//! encoding (bincode 2, fixed-width little-endian integers) and every check a receiver makes
//! before it trusts a header. Payload bytes follow the header raw and are never re-encoded.
//!
//! | offset | bytes | field                                                        |
//! |-------:|------:|--------------------------------------------------------------|
//! |      0 |     4 | magic `KVFT`                                                 |
//! |      4 |     2 | protocol version, u16 LE (= 1)                               |
//! |      6 |     1 | kind, u8 ([`FrameKind`])                                     |
//! |      7 |    32 | block id                                                     |
//! |     39 |    32 | namespace key (the receiver hashes under it)                 |
//! |     71 |     8 | length of the payload that follows, u64 LE                   |
//!
//! One block stream carries exactly one request (client → server: `Fetch`, length 0) and one
//! response (server → client: `Block` followed by `length` bytes, or `NotFound` /
//! `Unavailable` with length 0), each followed by the end of that direction of the stream.
//!
//! Push replication adds two exchanges on the same streams (codes 8–12, the header
//! unchanged): `Push` (client → server, followed by `length` bytes of the block, header ‖
//! payload, as the store holds them: "verify this block, install it, register yourself as
//! its owner, then answer"), answered by `Stored` (length 0: done), `Rejected` (length 0: the
//! bytes did not hash to the id) or `Unavailable` (length 0: not taken now); and `Probe`
//! (client → server, length 0: "do you hold this block?"), answered by `Held` (followed by
//! exactly 8 bytes: the block's stored length, u64 LE), `NotFound` or `Unavailable`.
//!
//! The UCX transport's one-sided read mode adds three kinds (codes 5–7; the header is
//! unchanged): `FetchRma` (client → server, length 0: map this block for me to read),
//! answered by `Lease` (server → client, followed by a [`crate::lease::LeaseDescriptor`] of
//! `length` ≤ [`crate::lease::LEASE_DESCRIPTOR_BYTES_MAX`] bytes: block length, address, rkey)
//! or `NotFound` / `Unavailable`; and `Release` (client → server, length 0, no answer: done
//! reading the oldest lease of this block on this connection).

use bincode::{Decode, Encode};
use kvfabric_store::{BlockId, NamespaceKey};

/// Magic at the start of every frame header.
pub const FRAME_MAGIC: [u8; 4] = *b"KVFT";
/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Encoded length of every frame header (fixed: fixed-width integers, arrays without prefix).
pub const FRAME_HEADER_LEN: usize = 4 + 2 + 1 + 32 + 32 + 8;

/// What a frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Client → server: send me this block (length 0).
    Fetch = 1,
    /// Server → client: the block's bytes (header ‖ payload) follow, `length` of them.
    Block = 2,
    /// Server → client: no such block here (length 0).
    NotFound = 3,
    /// Server → client: the block is known but cannot be served now (length 0).
    Unavailable = 4,
    /// Server → client: the block is mapped for a one-sided read; a lease descriptor of
    /// `length` bytes follows (UCX get mode).
    Lease = 5,
    /// Client → server: map this block for me to read (length 0; UCX get mode).
    FetchRma = 6,
    /// Client → server: done reading the oldest lease of this block on this connection
    /// (length 0, no answer; UCX get mode).
    Release = 7,
    /// Client → server: take this block; its bytes (header ‖ payload) follow, `length` of
    /// them (push replication).
    Push = 8,
    /// Server → client: the pushed block verified, is installed and registered (length 0).
    Stored = 9,
    /// Server → client: the pushed bytes did not hash to the id (length 0).
    Rejected = 10,
    /// Client → server: do you hold this block? (length 0)
    Probe = 11,
    /// Server → client: held; exactly [`HELD_LENGTH`] bytes follow, the block's stored length
    /// (u64 LE).
    Held = 12,
}

/// The length of a `Held` frame's body: the block's stored length as a u64.
pub const HELD_LENGTH: u64 = 8;

impl FrameKind {
    /// The kind with this wire code.
    pub fn from_code(code: u8) -> Option<FrameKind> {
        match code {
            1 => Some(FrameKind::Fetch),
            2 => Some(FrameKind::Block),
            3 => Some(FrameKind::NotFound),
            4 => Some(FrameKind::Unavailable),
            5 => Some(FrameKind::Lease),
            6 => Some(FrameKind::FetchRma),
            7 => Some(FrameKind::Release),
            8 => Some(FrameKind::Push),
            9 => Some(FrameKind::Stored),
            10 => Some(FrameKind::Rejected),
            11 => Some(FrameKind::Probe),
            12 => Some(FrameKind::Held),
            _ => None,
        }
    }

    /// Whether a client sends this kind (else a server does).
    pub fn is_request(self) -> bool {
        matches!(
            self,
            FrameKind::Fetch
                | FrameKind::FetchRma
                | FrameKind::Release
                | FrameKind::Push
                | FrameKind::Probe
        )
    }

    /// Whether a frame of this kind is followed by `length` bytes (else its length is 0).
    pub fn has_payload(self) -> bool {
        matches!(
            self,
            FrameKind::Block | FrameKind::Lease | FrameKind::Push | FrameKind::Held
        )
    }

    /// The kinds that may answer a request of this kind, and how an error names them.
    fn answers(self) -> (&'static [FrameKind], &'static str) {
        use FrameKind::*;
        match self {
            FetchRma => (
                &[Lease, NotFound, Unavailable],
                "Lease, NotFound or Unavailable",
            ),
            Push => (
                &[Stored, Rejected, Unavailable],
                "Stored, Rejected or Unavailable",
            ),
            Probe => (
                &[Held, NotFound, Unavailable],
                "Held, NotFound or Unavailable",
            ),
            _ => (
                &[Block, NotFound, Unavailable],
                "Block, NotFound or Unavailable",
            ),
        }
    }

    /// The wire codes, lowest to highest (for error texts and tests).
    pub const CODES: std::ops::RangeInclusive<u8> = 1..=12;
}

/// A decoded (or to-be-encoded) frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame says.
    pub kind: FrameKind,
    /// The block it is about.
    pub id: BlockId,
    /// The namespace the id was computed under.
    pub namespace: NamespaceKey,
    /// Bytes that follow the header (0 for every kind but `Block` and `Lease`).
    pub length: u64,
}

/// The header exactly as bincode lays it out; private so that only checked headers escape.
#[derive(Encode, Decode)]
struct WireHeader {
    magic: [u8; 4],
    version: u16,
    kind: u8,
    id: [u8; 32],
    namespace: [u8; 32],
    length: u64,
}

const WIRE_CONFIG: bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::Limit<FRAME_HEADER_LEN>,
> = bincode::config::standard()
    .with_little_endian()
    .with_fixed_int_encoding()
    .with_limit::<FRAME_HEADER_LEN>();

/// Why a frame header was refused. Every variant is a protocol violation by the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than a header.
    #[error("truncated frame header: expected {expected} bytes, found {found}")]
    Truncated {
        /// Bytes a header needs.
        expected: usize,
        /// Bytes there were.
        found: usize,
    },
    /// The first four bytes are not the magic.
    #[error("bad frame magic: expected {expected:?}, found {found:?}")]
    BadMagic {
        /// [`FRAME_MAGIC`].
        expected: [u8; 4],
        /// What came.
        found: [u8; 4],
    },
    /// A protocol version this crate does not speak.
    #[error("unsupported protocol version: expected {expected}, found {found}")]
    UnsupportedVersion {
        /// [`PROTOCOL_VERSION`].
        expected: u16,
        /// What came.
        found: u16,
    },
    /// A kind code outside [`FrameKind`].
    #[error("unknown frame kind: expected 1..=12, found {found}")]
    UnknownKind {
        /// The code.
        found: u8,
    },
    /// A valid kind in the wrong place (a response where a request belongs, or vice versa).
    #[error("unexpected frame kind: expected {expected}, found {found:?}")]
    UnexpectedKind {
        /// What this side accepts here.
        expected: &'static str,
        /// What came.
        found: FrameKind,
    },
    /// A payload length above the receiver's `max_frame_bytes`.
    #[error("frame too large: expected at most {max} payload bytes, found {found}")]
    TooLarge {
        /// The receiver's bound.
        max: u64,
        /// The announced length.
        found: u64,
    },
    /// A non-zero length on a kind that carries no payload.
    #[error("{kind:?} frame carries no payload: expected length 0, found {found}")]
    UnexpectedLength {
        /// The kind.
        kind: FrameKind,
        /// The announced length.
        found: u64,
    },
    /// A `Lease` whose descriptor length is outside what a descriptor can be.
    #[error("lease descriptor of bad size: expected {min}..={max} bytes, found {found}")]
    BadLeaseLength {
        /// Smallest descriptor (no rkey bytes).
        min: u64,
        /// Largest descriptor ([`crate::lease::LEASE_DESCRIPTOR_BYTES_MAX`]).
        max: u64,
        /// The announced length.
        found: u64,
    },
    /// A `Held` whose length is not [`HELD_LENGTH`].
    #[error("Held frame of bad size: expected {HELD_LENGTH} bytes, found {found}")]
    BadHeldLength {
        /// The announced length.
        found: u64,
    },
    /// A `Lease` descriptor that does not decode or check.
    #[error("bad lease descriptor: {0}")]
    BadLease(#[from] crate::lease::LeaseError),
    /// A response about another block or namespace than the one asked for.
    #[error("response for another block: expected {expected}, found {found}")]
    WrongBlock {
        /// The id asked for.
        expected: BlockId,
        /// The id in the response.
        found: BlockId,
    },
    /// Bytes after a frame where the stream should have ended (a request has no payload).
    #[error("trailing bytes: expected the stream to end after {expected} bytes, found more")]
    TrailingBytes {
        /// Bytes the frame had.
        expected: u64,
    },
    /// A response under another namespace than the one asked for.
    #[error("response under another namespace: expected {expected:?}, found {found:?}")]
    WrongNamespace {
        /// The namespace asked for.
        expected: NamespaceKey,
        /// The namespace in the response.
        found: NamespaceKey,
    },
}

impl FrameHeader {
    /// A request for `id` under `namespace`.
    pub fn fetch(namespace: NamespaceKey, id: BlockId) -> FrameHeader {
        FrameHeader::request(FrameKind::Fetch, namespace, id)
    }

    /// A request of `kind` (`Fetch`, `FetchRma`, `Release` or `Probe`) about `id`, length 0.
    pub fn request(kind: FrameKind, namespace: NamespaceKey, id: BlockId) -> FrameHeader {
        debug_assert!(kind.is_request() && !kind.has_payload());
        FrameHeader {
            kind,
            id,
            namespace,
            length: 0,
        }
    }

    /// Encodes to exactly [`FRAME_HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let wire = WireHeader {
            magic: FRAME_MAGIC,
            version: PROTOCOL_VERSION,
            kind: self.kind as u8,
            id: self.id.0,
            namespace: self.namespace.0,
            length: self.length,
        };
        let mut out = [0u8; FRAME_HEADER_LEN];
        let n = bincode::encode_into_slice(wire, &mut out, WIRE_CONFIG)
            .expect("a header always fits its fixed length");
        debug_assert_eq!(n, FRAME_HEADER_LEN);
        out
    }

    /// Decodes the first [`FRAME_HEADER_LEN`] bytes of `bytes` and checks magic, version, kind,
    /// and length against `max_frame_bytes`. Bytes past the header are not looked at.
    pub fn decode(bytes: &[u8], max_frame_bytes: u64) -> Result<FrameHeader, FrameError> {
        if bytes.len() < FRAME_HEADER_LEN {
            return Err(FrameError::Truncated {
                expected: FRAME_HEADER_LEN,
                found: bytes.len(),
            });
        }
        let (wire, used): (WireHeader, usize) =
            bincode::decode_from_slice(&bytes[..FRAME_HEADER_LEN], WIRE_CONFIG).map_err(|_| {
                // Fixed widths over an exact-length slice: only a short input can fail, and that
                // was ruled out above. Report it as truncation rather than panic on a peer's bytes.
                FrameError::Truncated {
                    expected: FRAME_HEADER_LEN,
                    found: bytes.len(),
                }
            })?;
        debug_assert_eq!(used, FRAME_HEADER_LEN);
        if wire.magic != FRAME_MAGIC {
            return Err(FrameError::BadMagic {
                expected: FRAME_MAGIC,
                found: wire.magic,
            });
        }
        if wire.version != PROTOCOL_VERSION {
            return Err(FrameError::UnsupportedVersion {
                expected: PROTOCOL_VERSION,
                found: wire.version,
            });
        }
        let kind =
            FrameKind::from_code(wire.kind).ok_or(FrameError::UnknownKind { found: wire.kind })?;
        if !kind.has_payload() && wire.length != 0 {
            return Err(FrameError::UnexpectedLength {
                kind,
                found: wire.length,
            });
        }
        let lease =
            crate::lease::LEASE_DESCRIPTOR_BYTES_MIN..=crate::lease::LEASE_DESCRIPTOR_BYTES_MAX;
        if kind == FrameKind::Lease && !lease.contains(&(wire.length as usize)) {
            return Err(FrameError::BadLeaseLength {
                min: *lease.start() as u64,
                max: *lease.end() as u64,
                found: wire.length,
            });
        }
        if kind == FrameKind::Held && wire.length != HELD_LENGTH {
            return Err(FrameError::BadHeldLength { found: wire.length });
        }
        if wire.length > max_frame_bytes {
            return Err(FrameError::TooLarge {
                max: max_frame_bytes,
                found: wire.length,
            });
        }
        Ok(FrameHeader {
            kind,
            id: BlockId(wire.id),
            namespace: NamespaceKey(wire.namespace),
            length: wire.length,
        })
    }
}

/// Server side: decodes a request without a body; only `Fetch`, `FetchRma`, `Release` and
/// `Probe` are accepted (a `Push` carries a block: [`decode_any_request`] bounds it).
pub fn decode_request(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
    // These requests never carry a payload (a non-zero length on one is refused in decode),
    // so no size bound applies here; checking the kind first gives the clearer error.
    let header = FrameHeader::decode(bytes, u64::MAX)?;
    if !header.kind.is_request() || header.kind.has_payload() {
        return Err(FrameError::UnexpectedKind {
            expected: "Fetch, FetchRma, Release or Probe",
            found: header.kind,
        });
    }
    Ok(header)
}

/// Server side: decodes any request, a `Push`'s block length bounded by `max_frame_bytes`.
pub fn decode_any_request(bytes: &[u8], max_frame_bytes: u64) -> Result<FrameHeader, FrameError> {
    let header = FrameHeader::decode(bytes, max_frame_bytes)?;
    if !header.kind.is_request() {
        return Err(FrameError::UnexpectedKind {
            expected: "Fetch, FetchRma, Release, Push or Probe",
            found: header.kind,
        });
    }
    Ok(header)
}

/// A `Push` of `block_len` bytes of block `id` under `namespace` (its bytes follow).
pub fn push_header(namespace: NamespaceKey, id: BlockId, block_len: u64) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Push,
        id,
        namespace,
        length: block_len,
    }
}

/// Client side: decodes the response to `request`; checks kind, id, namespace and length.
/// A `Fetch` is answered by `Block`, `NotFound` or `Unavailable`; a `FetchRma` by `Lease`,
/// `NotFound` or `Unavailable`; a `Push` by `Stored`, `Rejected` or `Unavailable`; a `Probe`
/// by `Held`, `NotFound` or `Unavailable`.
pub fn decode_response(
    bytes: &[u8],
    request: &FrameHeader,
    max_frame_bytes: u64,
) -> Result<FrameHeader, FrameError> {
    let header = FrameHeader::decode(bytes, max_frame_bytes)?;
    let (allowed, expected) = request.kind.answers();
    let fits = allowed.contains(&header.kind);
    if !fits {
        return Err(FrameError::UnexpectedKind {
            expected,
            found: header.kind,
        });
    }
    if header.id != request.id {
        return Err(FrameError::WrongBlock {
            expected: request.id,
            found: header.id,
        });
    }
    if header.namespace != request.namespace {
        // Same id under another key: hashing under it would check the wrong claim.
        return Err(FrameError::WrongNamespace {
            expected: request.namespace,
            found: header.namespace,
        });
    }
    Ok(header)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
