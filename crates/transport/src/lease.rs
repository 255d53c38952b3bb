//! The lease descriptor of the UCX transport's one-sided read mode, as pure functions.
//!
//! Owns the byte layout of what follows a `Lease` frame header (the header's `length` is the
//! descriptor's size) and every check a client makes before it reads remote memory with it:
//!
//! | offset | bytes | field                                                          |
//! |-------:|------:|----------------------------------------------------------------|
//! |      0 |     8 | block length (header ‖ payload) the server mapped, u64 LE      |
//! |      8 |     8 | its address in the server's process, u64 LE                    |
//! |     16 |     2 | packed rkey length `n`, u16 LE (1..=[`RKEY_BYTES_MAX`])        |
//! |     18 |   `n` | the packed rkey (`ucp_rkey_pack`), opaque                      |
//! | 18 + n |     2 | worker address length `w`, u16 LE (1..=[`WORKER_ADDRESS_BYTES_MAX`]) |
//! | 20 + n |   `w` | the server's UCP worker address (`ucp_worker_get_address`), opaque |
//!
//! The worker address is what the client connects its read endpoint to (UCX offers its
//! shared-memory transports, CMA among them, only to endpoints made from a worker address).
//! The descriptor is exactly `20 + n + w` bytes: the frame decoder bounds its length to
//! [`LEASE_DESCRIPTOR_BYTES_MIN`]`..=`[`LEASE_DESCRIPTOR_BYTES_MAX`] before a byte of it is
//! received, and [`LeaseDescriptor::decode`] checks that the parts add up.

/// Largest packed rkey accepted. UCX's rkeys are tens of bytes on TCP and shared memory and a
/// few hundred with several RDMA devices; a peer announcing more is refused.
pub const RKEY_BYTES_MAX: usize = 1024;
/// Largest worker address accepted (UCX's are a few hundred bytes with TCP and shared memory;
/// more with many RDMA devices).
pub const WORKER_ADDRESS_BYTES_MAX: usize = 4096;
/// Bytes of a descriptor besides its rkey and worker address.
pub const LEASE_FIXED_BYTES: usize = 8 + 8 + 2 + 2;
/// Smallest descriptor: the fixed fields, a one-byte rkey and a one-byte address.
pub const LEASE_DESCRIPTOR_BYTES_MIN: usize = LEASE_FIXED_BYTES + 2;
/// Largest descriptor.
pub const LEASE_DESCRIPTOR_BYTES_MAX: usize =
    LEASE_FIXED_BYTES + RKEY_BYTES_MAX + WORKER_ADDRESS_BYTES_MAX;

/// What a client needs to read one leased block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseDescriptor {
    /// Bytes to read (header ‖ payload).
    pub block_len: u64,
    /// Where they start in the server's address space.
    pub remote_addr: u64,
    /// The packed rkey that grants the read.
    pub rkey: Vec<u8>,
    /// The server's worker address, to read through.
    pub worker_address: Vec<u8>,
}

/// Why a descriptor was refused; a protocol violation by the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The descriptor's size is outside the bounds, or its rkey length does not match it.
    #[error("bad lease descriptor: expected {expected} bytes, found {found}")]
    BadLength {
        /// Bytes the fields call for.
        expected: String,
        /// Bytes there were.
        found: usize,
    },
    /// A zero-length block, or one above the client's `max_frame_bytes`.
    #[error("leased block of bad size: expected 1..={max} bytes, found {found}")]
    BadBlockLength {
        /// The client's `max_frame_bytes`.
        max: u64,
        /// The announced length.
        found: u64,
    },
    /// The announced range wraps around the address space.
    #[error("leased range wraps: address {addr:#x} + {len} bytes")]
    BadRange {
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
    },
}

impl LeaseDescriptor {
    /// Encodes to `20 + rkey.len() + worker_address.len()` bytes. The rkey must be
    /// 1..=[`RKEY_BYTES_MAX`] bytes and the address 1..=[`WORKER_ADDRESS_BYTES_MAX`] (the
    /// server checks before it answers).
    pub fn encode(&self) -> Vec<u8> {
        debug_assert!((1..=RKEY_BYTES_MAX).contains(&self.rkey.len()));
        debug_assert!((1..=WORKER_ADDRESS_BYTES_MAX).contains(&self.worker_address.len()));
        let mut out =
            Vec::with_capacity(LEASE_FIXED_BYTES + self.rkey.len() + self.worker_address.len());
        out.extend_from_slice(&self.block_len.to_le_bytes());
        out.extend_from_slice(&self.remote_addr.to_le_bytes());
        out.extend_from_slice(&(self.rkey.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.rkey);
        out.extend_from_slice(&(self.worker_address.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.worker_address);
        out
    }

    /// Decodes and checks a descriptor of exactly `bytes.len()` bytes, for a client that
    /// accepts blocks of at most `max_frame_bytes`.
    pub fn decode(bytes: &[u8], max_frame_bytes: u64) -> Result<LeaseDescriptor, LeaseError> {
        if !(LEASE_DESCRIPTOR_BYTES_MIN..=LEASE_DESCRIPTOR_BYTES_MAX).contains(&bytes.len()) {
            return Err(LeaseError::BadLength {
                expected: format!("{LEASE_DESCRIPTOR_BYTES_MIN}..={LEASE_DESCRIPTOR_BYTES_MAX}"),
                found: bytes.len(),
            });
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let (block_len, remote_addr) = (u64_at(0), u64_at(8));
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
        let rkey_len = u16_at(16);
        // The address length sits right after the rkey; it must be inside the descriptor.
        let addr_len = match 18 + rkey_len + 2 <= bytes.len() {
            true => u16_at(18 + rkey_len),
            false => 0,
        };
        if !(1..=RKEY_BYTES_MAX).contains(&rkey_len)
            || !(1..=WORKER_ADDRESS_BYTES_MAX).contains(&addr_len)
            || LEASE_FIXED_BYTES + rkey_len + addr_len != bytes.len()
        {
            return Err(LeaseError::BadLength {
                expected: format!(
                    "{LEASE_FIXED_BYTES} + an rkey of 1..={RKEY_BYTES_MAX} ({rkey_len}) + an \
                     address of 1..={WORKER_ADDRESS_BYTES_MAX} ({addr_len})"
                ),
                found: bytes.len(),
            });
        }
        if block_len == 0 || block_len > max_frame_bytes {
            return Err(LeaseError::BadBlockLength {
                max: max_frame_bytes,
                found: block_len,
            });
        }
        if remote_addr.checked_add(block_len).is_none() {
            return Err(LeaseError::BadRange {
                addr: remote_addr,
                len: block_len,
            });
        }
        Ok(LeaseDescriptor {
            block_len,
            remote_addr,
            rkey: bytes[18..18 + rkey_len].to_vec(),
            worker_address: bytes[20 + rkey_len..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(rkey_len: usize) -> LeaseDescriptor {
        LeaseDescriptor {
            block_len: 4_497_472,
            remote_addr: 0x7f00_1234_5000,
            rkey: (0..rkey_len).map(|i| i as u8).collect(),
            worker_address: vec![0xAD; 300],
        }
    }

    #[test]
    fn round_trips_at_both_bounds() {
        for (n, w) in [
            (1, 1),
            (37, 300),
            (RKEY_BYTES_MAX, WORKER_ADDRESS_BYTES_MAX),
        ] {
            let d = LeaseDescriptor {
                worker_address: vec![7; w],
                ..lease(n)
            };
            let bytes = d.encode();
            assert_eq!(bytes.len(), LEASE_FIXED_BYTES + n + w);
            assert_eq!(&bytes[0..8], &4_497_472u64.to_le_bytes());
            assert_eq!(LeaseDescriptor::decode(&bytes, 64 << 20), Ok(d));
        }
        assert_eq!(
            LEASE_DESCRIPTOR_BYTES_MAX,
            LEASE_FIXED_BYTES + RKEY_BYTES_MAX + WORKER_ADDRESS_BYTES_MAX
        );
    }

    #[test]
    fn refuses_sizes_that_do_not_add_up() {
        let mut bytes = lease(40).encode();
        bytes.push(0);
        assert!(matches!(
            LeaseDescriptor::decode(&bytes, u64::MAX),
            Err(LeaseError::BadLength { found: 361, .. })
        ));
        assert!(matches!(
            LeaseDescriptor::decode(&bytes[..10], u64::MAX),
            Err(LeaseError::BadLength { found: 10, .. })
        ));
        let mut zero = lease(1).encode();
        zero[16] = 0;
        assert!(matches!(
            LeaseDescriptor::decode(&zero, u64::MAX),
            Err(LeaseError::BadLength { .. })
        ));
        // An rkey length pointing past the end.
        let mut long = lease(1).encode();
        long[16..18].copy_from_slice(&1000u16.to_le_bytes());
        assert!(matches!(
            LeaseDescriptor::decode(&long, u64::MAX),
            Err(LeaseError::BadLength { .. })
        ));
        // No address.
        let mut no_addr = lease(5).encode();
        no_addr.truncate(LEASE_FIXED_BYTES + 5);
        no_addr[18 + 5..].copy_from_slice(&0u16.to_le_bytes());
        assert!(matches!(
            LeaseDescriptor::decode(&no_addr, u64::MAX),
            Err(LeaseError::BadLength { .. })
        ));
    }

    #[test]
    fn refuses_blocks_outside_the_bound_and_wrapping_ranges() {
        let d = lease(8);
        assert_eq!(
            LeaseDescriptor::decode(&d.encode(), 1000),
            Err(LeaseError::BadBlockLength {
                max: 1000,
                found: 4_497_472
            })
        );
        let empty = LeaseDescriptor {
            block_len: 0,
            ..d.clone()
        };
        assert!(matches!(
            LeaseDescriptor::decode(&empty.encode(), u64::MAX),
            Err(LeaseError::BadBlockLength { found: 0, .. })
        ));
        let wraps = LeaseDescriptor {
            remote_addr: u64::MAX - 10,
            ..d
        };
        assert!(matches!(
            LeaseDescriptor::decode(&wraps.encode(), u64::MAX),
            Err(LeaseError::BadRange { .. })
        ));
    }
}
