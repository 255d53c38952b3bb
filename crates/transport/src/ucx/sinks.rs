//! The sinks of a push's and a probe's answers, fed on the progress thread like a fetch's
//! receiver: a push's `Stored` carries nothing ([`Ack`]), a probe's `Held` exactly the
//! block's stored length as 8 little-endian bytes ([`Length`]). Anything else is refused as
//! an overrun or a truncation, as a block's receiver would.

use crate::frame::HELD_LENGTH;
use crate::receive::{PayloadSink, ReceiveError};

/// Takes a body of length 0.
#[derive(Debug, Default)]
pub(crate) struct Ack {
    length: u64,
}

impl PayloadSink for Ack {
    type Output = ();

    fn begin(&mut self, length: u64) {
        self.length = length;
    }

    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        Err(ReceiveError::Overrun {
            expected: 0,
            found: chunk.len() as u64,
        })
    }

    fn finish(self) -> Result<(), ReceiveError> {
        if self.length != 0 {
            return Err(ReceiveError::Truncated {
                expected: self.length,
                found: 0,
            });
        }
        Ok(())
    }
}

/// Takes the 8 bytes of a stored length.
#[derive(Debug, Default)]
pub(crate) struct Length {
    bytes: Vec<u8>,
}

impl PayloadSink for Length {
    type Output = u64;

    fn begin(&mut self, _length: u64) {}

    fn push(&mut self, chunk: &[u8]) -> Result<(), ReceiveError> {
        let found = (self.bytes.len() + chunk.len()) as u64;
        if found > HELD_LENGTH {
            return Err(ReceiveError::Overrun {
                expected: HELD_LENGTH,
                found,
            });
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    fn finish(self) -> Result<u64, ReceiveError> {
        let bytes: [u8; HELD_LENGTH as usize] =
            self.bytes
                .as_slice()
                .try_into()
                .map_err(|_| ReceiveError::Truncated {
                    expected: HELD_LENGTH,
                    found: self.bytes.len() as u64,
                })?;
        Ok(u64::from_le_bytes(bytes))
    }
}
