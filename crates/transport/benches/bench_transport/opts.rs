//! Command-line knobs shared by the bench's two processes (the parent forwards its own).

use kvfabric_transport::{QuicTuning, TransportConfig, UcxTuning};

/// What one run measures, and the QUIC settings under test.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    /// Distinct blocks the server holds.
    pub(crate) blocks: usize,
    /// Times each phase fetches every block.
    pub(crate) rounds: usize,
    /// `fetches_in_flight_max` for the QUIC phases.
    pub(crate) inflight: usize,
    /// The tuned QUIC settings.
    pub(crate) tuning: QuicTuning,
    /// Skip the (slow) stock-settings phase.
    pub(crate) skip_stock: bool,
    /// UCX settings under test (phase (d), with the `ucx` feature).
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) ucx: UcxTuning,
    /// Args as given, to forward to the child.
    pub(crate) raw: Vec<String>,
}

impl Opts {
    pub(crate) fn parse(args: &[String]) -> anyhow::Result<Opts> {
        let mut o = Opts {
            blocks: 16,
            rounds: 20,
            inflight: 1,
            tuning: QuicTuning::default(),
            skip_stock: false,
            ucx: UcxTuning::default(),
            raw: Vec::new(),
        };
        let mut it = args.iter().peekable();
        while let Some(a) = it.next() {
            let mut value = |name: &str| -> anyhow::Result<u64> {
                let v = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?;
                o.raw.extend([name.to_string(), v.clone()]);
                Ok(v.parse()?)
            };
            match a.as_str() {
                "--blocks" => o.blocks = value(a)? as usize,
                "--workers" | "--server-workers" => {
                    value(a)?;
                }
                "--rounds" => o.rounds = value(a)? as usize,
                "--inflight" => o.inflight = value(a)? as usize,
                "--mtu" => o.tuning.initial_mtu_bytes = value(a)? as u16,
                "--max-udp" => o.tuning.max_udp_payload_bytes = value(a)? as u16,
                "--stream-window" => o.tuning.stream_receive_window_bytes = value(a)?,
                "--conn-window" => o.tuning.connection_receive_window_bytes = value(a)?,
                "--send-window" => o.tuning.send_window_bytes = value(a)?,
                "--socket-buffer" => o.tuning.socket_buffer_bytes = value(a)? as usize,
                "--no-mtud" => {
                    o.tuning.mtu_discovery = false;
                    o.raw.push(a.clone());
                }
                "--gso" => {
                    o.tuning.segmentation_offload = true;
                    o.raw.push(a.clone());
                }
                "--fair" => {
                    o.tuning.send_fairness = true;
                    o.raw.push(a.clone());
                }
                "--ucx-chunk" => o.ucx.recv_chunk_bytes = value(a)? as usize,
                "--ucx-posted" => o.ucx.recv_chunks_posted = value(a)? as usize,
                "--ucx-tls" | "--ucx-set" => {
                    let v = it
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))?;
                    o.raw.extend([a.clone(), v.clone()]);
                    if a == "--ucx-tls" {
                        o.ucx.tls = v.clone();
                    } else {
                        let (name, val) = v
                            .split_once('=')
                            .ok_or_else(|| anyhow::anyhow!("--ucx-set NAME=VALUE, found {v}"))?;
                        o.ucx.settings.push((name.to_string(), val.to_string()));
                    }
                }
                "--skip-stock" => {
                    o.skip_stock = true;
                    o.raw.push(a.clone());
                }
                // cargo bench passes `--bench`; anything else unknown is ignored too.
                _ => {}
            }
        }
        Ok(o)
    }

    /// The tuned config (crate defaults plus the knobs given).
    pub(crate) fn tuned(&self) -> TransportConfig {
        TransportConfig {
            fetches_in_flight_max: self.inflight,
            quic: self.tuning.clone(),
            ucx: self.ucx.clone(),
            ..TransportConfig::default()
        }
    }

    /// quinn's stock settings as far as the config reaches them: 1200-byte initial MTU, 1472
    /// max UDP payload, 1.25 MB stream window, 10 MB send window, OS socket buffers.
    pub(crate) fn stock(&self) -> TransportConfig {
        TransportConfig {
            fetches_in_flight_max: self.inflight,
            quic: QuicTuning {
                initial_mtu_bytes: 1200,
                max_udp_payload_bytes: 1472,
                mtu_discovery: true,
                segmentation_offload: true,
                stream_receive_window_bytes: 1_250_000,
                connection_receive_window_bytes: 1 << 32,
                send_window_bytes: 10_000_000,
                send_fairness: true,
                socket_buffer_bytes: 0,
            },
            ..TransportConfig::default()
        }
    }
}
