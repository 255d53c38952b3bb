//! Property checks for the WAL's decoders (`fuzzing` feature), re-exported as
//! [`crate::fuzzing::wal_record`] and [`crate::fuzzing::wal_replay`]: children of the WAL so
//! that they frame records and build segments with its own encoders.

pub mod record;
pub mod replay;
