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
/// Largest `leases_per_connection_max`.
pub const LEASES_PER_CONNECTION_MAX: usize = 4096;

/// How a UCX client fetches a block's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UcxMode {
    /// The server sends the block on the UCP stream (two-sided; `ucp_stream_send_nbx`).
    Stream,
    /// The server maps the block and answers with a lease (address and rkey); the client reads
    /// it with one-sided gets (`ucp_get_nbx`): a CMA read on one host, an RDMA READ with
    /// `tls = "rc"`, emulated by UCX over `tcp`.
    Get,
}

impl UcxMode {
    /// The name in config files and bench options.
    pub fn as_str(self) -> &'static str {
        match self {
            UcxMode::Stream => "stream",
            UcxMode::Get => "get",
        }
    }

    /// Parses `stream` or `get`.
    pub fn parse(s: &str) -> Result<UcxMode, TransportError> {
        match s {
            "stream" => Ok(UcxMode::Stream),
            "get" => Ok(UcxMode::Get),
            other => Err(TransportError::Config {
                field: "ucx.mode",
                reason: format!("expected \"stream\" or \"get\", found {other:?}"),
            }),
        }
    }
}

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
    /// In `get` mode: gets of `recv_chunk_bytes` posted ahead per block being read (they land
    /// in the block's own buffer, so they cost no extra memory).
    pub recv_chunks_posted: usize,
    /// How this side fetches: `stream` (the server sends) or `get` (one-sided reads of a
    /// block the server maps). A server answers both, whatever its own mode.
    pub mode: UcxMode,
    /// Leases (mapped blocks awaiting the client's `Release`) one server connection may hold;
    /// a `FetchRma` past it is answered `Unavailable` (counted in `leases_refused`). Keep it at
    /// least the clients' `fetches_in_flight_max`. A lease also ends when its connection
    /// closes or after `fetch_timeout_ms`.
    pub leases_per_connection_max: usize,
    /// Server side of get mode: copy each leased block into memory UCX allocates (shared
    /// memory when `tls` has `sm`, `posix` or `sysv`), from a pool reused from lease to lease,
    /// instead of mapping the block where it lies. On one host this is what makes a get a
    /// plain memory copy by the reader: UCX 1.13 reads another process's memory directly only
    /// out of its shared-memory regions (its CMA transport does not serve user gets), and
    /// reads other memory through emulation (over `tcp`). Off on RDMA fabrics (`rc`), where
    /// the NIC reads the mapped block in place with no copy at all.
    pub stage_leases: bool,
    /// Client side of get mode, where UCX maps a leased block into this process (staged
    /// leases on one host) and the block is read chunk by chunk (below 1 MiB, a sink that
    /// does not verify, or no second hashing thread): copy it on a helper thread while the
    /// progress thread hashes the chunks already copied, instead of copying and hashing in
    /// turn on the progress thread. Verified blocks of 1 MiB and up are always copied and
    /// hashed by two threads, each on its own part (see the crate docs).
    pub copy_thread: bool,
}

impl Default for UcxTuning {
    fn default() -> UcxTuning {
        UcxTuning {
            tls: "tcp".into(),
            settings: Vec::new(),
            // One hash batch (receive::HASH_BATCH_BYTES): each chunk is hashed in one call.
            recv_chunk_bytes: 512 << 10,
            recv_chunks_posted: 2,
            mode: UcxMode::Stream,
            leases_per_connection_max: 32,
            stage_leases: false,
            copy_thread: false,
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
        if !(1..=LEASES_PER_CONNECTION_MAX).contains(&self.leases_per_connection_max) {
            return bad(
                "ucx.leases_per_connection_max",
                format!(
                    "expected 1..={LEASES_PER_CONNECTION_MAX}, found {}",
                    self.leases_per_connection_max
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
        t.leases_per_connection_max = 0;
        assert_eq!(field_of(&t), "ucx.leases_per_connection_max");
        let mut t = d.clone();
        t.settings = vec![("UCX_TLS".into(), "rc".into())];
        assert_eq!(field_of(&t), "ucx.settings");
        let mut t = d;
        t.settings = vec![("TCP_SNDBUF".into(), "4m\0".into())];
        assert_eq!(field_of(&t), "ucx.settings");
    }

    #[test]
    fn modes_parse_by_name_and_refuse_others() {
        for m in [UcxMode::Stream, UcxMode::Get] {
            assert_eq!(UcxMode::parse(m.as_str()).expect("known"), m);
        }
        match UcxMode::parse("put") {
            Err(TransportError::Config { field, reason }) => {
                assert_eq!(field, "ucx.mode");
                assert!(reason.contains("\"put\""), "{reason}");
            }
            other => panic!("expected a config error, found {other:?}"),
        }
    }
}
