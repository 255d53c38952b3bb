//! [`UcxTuning`]: the UCX transport's knobs, applied with `ucp_config_modify` before
//! `ucp_init`, and the receive sizes of its progress thread.
//!
//! Lives in every build (not only with the `ucx` feature) so that a node's config file reads
//! the same whichever transports were compiled in.

use crate::error::TransportError;

/// Smallest `recv_chunk_bytes`.
pub const RECV_CHUNK_BYTES_MIN: usize = 4 << 10;
/// Largest `recv_chunk_bytes`.
pub const RECV_CHUNK_BYTES_MAX: usize = 64 << 20;
/// Largest `recv_chunks_posted`.
pub const RECV_CHUNKS_POSTED_MAX: usize = 16;
/// Most extra UCX settings accepted.
pub const UCX_SETTINGS_MAX: usize = 64;

/// UCX settings and receive sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UcxTuning {
    /// UCX transports to use (`UCX_TLS`), e.g. `tcp`, `rc,sm`, `ud_x`. The default `tcp`
    /// runs anywhere, loopback included; on an InfiniBand or RoCE fabric use `rc` (or leave
    /// UCX to choose with `all`). Empty keeps whatever `UCX_TLS` the environment says.
    pub tls: String,
    /// Further UCX settings, by name without the `UCX_` prefix (`("TCP_SNDBUF", "4m")`),
    /// applied after `tls` and the keep-alive interval, so they win.
    pub settings: Vec<(String, String)>,
    /// Payload bytes per posted receive. Each completed chunk is handed to the verifying
    /// receiver (copied once, hashed while in cache) while the next one is already posted.
    pub recv_chunk_bytes: usize,
    /// Receives posted ahead per connection while a payload streams in (2: double
    /// buffering). Memory per client connection is `recv_chunk_bytes × recv_chunks_posted`.
    pub recv_chunks_posted: usize,
}

impl Default for UcxTuning {
    fn default() -> UcxTuning {
        UcxTuning {
            tls: "tcp".into(),
            settings: Vec::new(),
            // One hash batch (receive::HASH_BATCH_BYTES): each chunk is hashed in one call.
            recv_chunk_bytes: 512 << 10,
            recv_chunks_posted: 2,
        }
    }
}

fn bad(field: &'static str, reason: String) -> Result<(), TransportError> {
    Err(TransportError::Config { field, reason })
}

impl UcxTuning {
    /// Checks each field's range; names and values must be passable to C (no NUL byte).
    pub fn validate(&self) -> Result<(), TransportError> {
        if !(RECV_CHUNK_BYTES_MIN..=RECV_CHUNK_BYTES_MAX).contains(&self.recv_chunk_bytes) {
            return bad(
                "ucx.recv_chunk_bytes",
                format!(
                    "expected {RECV_CHUNK_BYTES_MIN}..={RECV_CHUNK_BYTES_MAX}, found {}",
                    self.recv_chunk_bytes
                ),
            );
        }
        if !(1..=RECV_CHUNKS_POSTED_MAX).contains(&self.recv_chunks_posted) {
            return bad(
                "ucx.recv_chunks_posted",
                format!(
                    "expected 1..={RECV_CHUNKS_POSTED_MAX}, found {}",
                    self.recv_chunks_posted
                ),
            );
        }
        if self.tls.contains('\0') {
            return bad("ucx.tls", "expected no NUL byte, found one".into());
        }
        if self.settings.len() > UCX_SETTINGS_MAX {
            return bad(
                "ucx.settings",
                format!(
                    "expected at most {UCX_SETTINGS_MAX} settings, found {}",
                    self.settings.len()
                ),
            );
        }
        for (name, value) in &self.settings {
            if name.is_empty() || name.contains('\0') || value.contains('\0') {
                return bad(
                    "ucx.settings",
                    format!(
                        "expected a non-empty name and no NUL byte, found {name:?} = {value:?}"
                    ),
                );
            }
            if name.starts_with("UCX_") {
                return bad(
                    "ucx.settings",
                    format!("expected a name without the UCX_ prefix, found {name:?}"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(t: &UcxTuning) -> &'static str {
        match t.validate() {
            Err(TransportError::Config { field, .. }) => field,
            other => panic!("expected a config error, found {other:?}"),
        }
    }

    #[test]
    fn defaults_validate_and_each_bound_is_checked() {
        let d = UcxTuning::default();
        d.validate().expect("defaults are valid");
        let mut t = d.clone();
        t.recv_chunk_bytes = 100;
        assert_eq!(field_of(&t), "ucx.recv_chunk_bytes");
        let mut t = d.clone();
        t.recv_chunks_posted = 0;
        assert_eq!(field_of(&t), "ucx.recv_chunks_posted");
        let mut t = d.clone();
        t.settings = vec![("UCX_TLS".into(), "rc".into())];
        assert_eq!(field_of(&t), "ucx.settings");
        let mut t = d;
        t.settings = vec![("TCP_SNDBUF".into(), "4m\0".into())];
        assert_eq!(field_of(&t), "ucx.settings");
    }
}
