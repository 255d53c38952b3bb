//! Property checks for the disk tier's decoders (`fuzzing` feature), re-exported as
//! [`crate::fuzzing::disk_entry`] and [`crate::fuzzing::disk_recover`]: children of the tier
//! so that they build segments with the tier's own encoders.

pub mod entry;
pub mod recover;
