//! `[transport]`: what carries blocks between members and the bounds of the node's endpoint.
//!
//! ```toml
//! [transport]                       # optional, every key optional (used by cluster members)
//! kind = "quic"                     # quic (default): blocks, Raft and control on one QUIC
//!                                   # endpoint at the member's `transport` address (mTLS);
//!                                   # ucx: blocks over UCX at `transport` (needs a build
//!                                   # with --features ucx; no TLS: trusted fabrics only),
//!                                   # Raft and control on QUIC at the member's `raft` address
//! max_frame_bytes = "64 MiB"        # largest block sent or accepted
//! fetches_in_flight_max = 16        # fetches and pushes in flight at once
//! serve_streams_max = 32            # streams one peer may have open on this node
//! connections_max = 256             # connections open at once
//! connect_timeout_ms = 1000         # a dial (handshake included)
//! fetch_timeout_ms = 30000          # one whole fetch or push
//! request_timeout_ms = 5000         # a server waiting for a request
//! idle_timeout_ms = 3000            # a connection silent this long is dead (QUIC idle)
//! keep_alive_ms = 1000              # below idle_timeout_ms
//! [transport.quic]                  # QUIC tuning (kvfabric_transport::QuicTuning)
//! initial_mtu_bytes = 1200
//! max_udp_payload_bytes = 65527     # 1452 on plain Ethernet, ~8952 with jumbo frames
//! mtu_discovery = true
//! segmentation_offload = false      # only with max_udp_payload_bytes <= 6550
//! stream_receive_window_bytes = "8 MiB"
//! connection_receive_window_bytes = "32 MiB"
//! send_window_bytes = "32 MiB"
//! send_fairness = false
//! socket_buffer_bytes = "4 MiB"
//! initial_rtt_ms = 10               # round trip assumed before one is measured: an
//!                                   # unanswered dial sends its Initial again after 3x this
//! join_sends = true                 # consecutive full batches of a connection in one GSO
//!                                   # send of up to 64 KiB (quinn hands over 10 datagrams)
//! adapt_to_path = true              # the settings above on loopback; to any other address
//!                                   # datagrams <= 6550 B found by MTU discovery, with GSO
//!                                   # (kvfabric_transport::quic::path); false: the settings
//!                                   # above on every path
//! [transport.ucx]                   # UCX (kind = "ucx"; kvfabric_transport::UcxTuning)
//! tls = "tcp"                       # "rc" on InfiniBand / RoCE
//! mode = "stream"                   # stream | get (one-sided reads)
//! recv_chunk_bytes = "512 KiB"
//! recv_chunks_posted = 2
//! leases_per_connection_max = 16
//! stage_leases = false
//! ```
//!
//! Every key is checked by the transport's own `validate()` (fields against each other); a
//! refusal names `transport.<key>`.

use kvfabric_core::config::{BlockTransport, TransportSettings};
use kvfabric_store::ConfigError;
use kvfabric_transport::{TransportConfig, TransportError, UcxMode};

use super::raw::RawTransport;
use super::validate::Check;

/// The node's transport defaults: the transport crate's, with the connect and idle bounds
/// that let a dead peer be told from a slow one within a second or three (see
/// `docs/API.md`, "Failover").
pub(crate) fn node_defaults() -> TransportConfig {
    TransportConfig {
        connect_timeout_ms: 1_000,
        idle_timeout_ms: 3_000,
        keep_alive_ms: 1_000,
        ..TransportConfig::default()
    }
}

/// Validates `raw`, filling defaults.
pub(super) fn check(c: &Check<'_>, raw: &RawTransport) -> Result<TransportSettings, ConfigError> {
    let kind = match raw.kind.as_deref() {
        None | Some("quic") => BlockTransport::Quic,
        Some("ucx") => BlockTransport::Ucx,
        Some(other) => {
            return Err(c.err(
                "transport.kind",
                format!("expected \"quic\" or \"ucx\", found {other:?}"),
            ))
        }
    };
    let mut t = node_defaults();
    macro_rules! set {
        ($($field:ident),*) => { $( if let Some(v) = raw.$field { t.$field = v; } )* };
    }
    set!(
        fetches_in_flight_max,
        serve_streams_max,
        connections_max,
        connect_timeout_ms,
        fetch_timeout_ms,
        request_timeout_ms,
        idle_timeout_ms,
        keep_alive_ms
    );
    if let Some(b) = raw.max_frame_bytes {
        t.max_frame_bytes = b.0;
    }
    let q = &raw.quic;
    macro_rules! set_quic {
        ($($field:ident),*) => { $( if let Some(v) = q.$field { t.quic.$field = v; } )* };
    }
    set_quic!(
        initial_mtu_bytes,
        max_udp_payload_bytes,
        mtu_discovery,
        segmentation_offload,
        send_fairness,
        initial_rtt_ms,
        join_sends,
        adapt_to_path
    );
    for (v, to) in [
        (
            q.stream_receive_window_bytes,
            &mut t.quic.stream_receive_window_bytes,
        ),
        (
            q.connection_receive_window_bytes,
            &mut t.quic.connection_receive_window_bytes,
        ),
        (q.send_window_bytes, &mut t.quic.send_window_bytes),
    ] {
        if let Some(b) = v {
            *to = b.0;
        }
    }
    if let Some(b) = q.socket_buffer_bytes {
        t.quic.socket_buffer_bytes = b.0 as usize;
    }
    let u = &raw.ucx;
    if let Some(tls) = &u.tls {
        t.ucx.tls = tls.clone();
    }
    if let Some(m) = &u.mode {
        t.ucx.mode = UcxMode::parse(m).map_err(|e| c.err("transport.ucx.mode", e.to_string()))?;
    }
    if let Some(b) = u.recv_chunk_bytes {
        t.ucx.recv_chunk_bytes = b.0 as usize;
    }
    if let Some(v) = u.recv_chunks_posted {
        t.ucx.recv_chunks_posted = v;
    }
    if let Some(v) = u.leases_per_connection_max {
        t.ucx.leases_per_connection_max = v;
    }
    if let Some(v) = u.stage_leases {
        t.ucx.stage_leases = v;
    }
    t.validate().map_err(|e| match e {
        TransportError::Config { field, reason } => c.err(&format!("transport.{field}"), reason),
        other => c.err("transport", other.to_string()),
    })?;
    Ok(TransportSettings { kind, config: t })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const BASE: &str = "[node]\nid = 1\nhttp_listen = \"127.0.0.1:0\"\ndata_dir = \"d\"\n[tiers]\nhost_bytes = \"64 MiB\"\n[cluster]\ncerts_dir = \"certs\"\ngenerate_dev_certs = true\n[[cluster.members]]\nid = 1\napi = \"http://127.0.0.1:7101\"\ntransport = \"127.0.0.1:7201\"\nraft = \"127.0.0.1:7301\"\n";

    fn transport(extra: &str) -> Result<TransportSettings, ConfigError> {
        let text = format!("{BASE}\n{extra}");
        super::super::parse("t.toml", Path::new("/tmp"), &text)
            .map(|l| l.config.cluster.expect("[cluster]").transport)
    }

    #[test]
    fn defaults_tuning_and_bad_keys_are_named() {
        let d = transport("").unwrap();
        assert_eq!(d.kind, BlockTransport::Quic);
        assert_eq!(d.config, node_defaults());
        let t = transport(
            "[transport]\nkind = \"ucx\"\nfetch_timeout_ms = 9000\n[transport.quic]\nmax_udp_payload_bytes = 1452\n[transport.ucx]\nmode = \"get\"\nrecv_chunk_bytes = \"256 KiB\"\n",
        )
        .unwrap();
        assert_eq!(t.kind, BlockTransport::Ucx);
        assert_eq!(t.config.fetch_timeout_ms, 9000);
        assert_eq!(t.config.quic.max_udp_payload_bytes, 1452);
        assert_eq!(t.config.ucx.mode, UcxMode::Get);
        assert_eq!(t.config.ucx.recv_chunk_bytes, 256 << 10);
        for (text, key) in [
            ("[transport]\nkind = \"tcp\"", "transport.kind"),
            (
                "[transport]\nkeep_alive_ms = 5000",
                "transport.keep_alive_ms",
            ),
            (
                "[transport.quic]\nsegmentation_offload = true",
                "transport.quic.segmentation_offload",
            ),
            ("[transport.ucx]\nmode = \"push\"", "transport.ucx.mode"),
        ] {
            let e = transport(text).unwrap_err();
            assert_eq!(e.key, key, "{e}");
        }
        assert!(transport("[transport]\nspeed = 1").is_err());
    }

    #[test]
    fn the_path_rule_is_on_unless_turned_off() {
        assert!(transport("").unwrap().config.quic.adapt_to_path);
        let t = transport("[transport.quic]\nadapt_to_path = false").unwrap();
        assert!(!t.config.quic.adapt_to_path);
    }
}
