//! Command-line knobs shared by the bench's two processes (the parent forwards its own).

use std::path::PathBuf;

use crate::{QuicTuning, TransportConfig, UcxTuning};

/// What one run measures, and the QUIC settings under test.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    /// Distinct blocks the server holds.
    pub(crate) blocks: usize,
    /// Times each phase fetches every block.
    pub(crate) rounds: usize,
    /// `fetches_in_flight_max` for the QUIC phases and UCX stream mode.
    pub(crate) inflight: usize,
    /// `fetches_in_flight_max` for the UCX get-mode phases: two by default, so that the
    /// server stages (and leases) the next block while the client reads this one.
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) get_inflight: usize,
    /// The tuned QUIC settings.
    pub(crate) tuning: QuicTuning,
    /// Skip the (slow) stock-settings phase.
    pub(crate) skip_stock: bool,
    /// UCX settings under test (phase (d), with the `ucx` feature).
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) ucx: UcxTuning,
    /// `ucx.tls` of the get-mode phase over shared memory (leases staged in UCX memory).
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) ucx_shm_tls: String,
    /// Tokio worker threads of the client process (0: the calling thread alone).
    pub(crate) workers: usize,
    /// Tokio worker threads of the server process (0: the calling thread alone).
    pub(crate) server_workers: usize,
    /// `--serve DIR`: be the server process, with the certificates in DIR.
    pub(crate) serve: Option<PathBuf>,
    /// Args as given, to forward to the child.
    pub(crate) raw: Vec<String>,
}

impl Opts {
    /// Parses the bench's options; an unknown one is an error (cargo's `--bench` aside).
    pub(crate) fn parse(args: &[String]) -> anyhow::Result<Opts> {
        let mut o = Opts {
            blocks: 16,
            rounds: 20,
            inflight: 1,
            get_inflight: 2,
            tuning: QuicTuning::default(),
            skip_stock: false,
            ucx: UcxTuning::default(),
            ucx_shm_tls: "sm,tcp".into(),
            workers: 1,
            server_workers: 1,
            serve: None,
            raw: Vec::new(),
        };
        let mut it = args.iter().peekable();
        while let Some(a) = it.next() {
            let mut value = |name: &str| -> anyhow::Result<u64> {
                let v = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?;
                o.raw.extend([name.to_string(), v.clone()]);
                v.parse()
                    .map_err(|e| anyhow::anyhow!("{name}: expected a number, found {v:?}: {e}"))
            };
            match a.as_str() {
                "--blocks" => o.blocks = value(a)? as usize,
                "--workers" => o.workers = value(a)? as usize,
                "--server-workers" => o.server_workers = value(a)? as usize,
                "--serve" => {
                    let dir = it
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("--serve needs a value"))?;
                    o.serve = Some(PathBuf::from(dir));
                }
                "--rounds" => o.rounds = value(a)? as usize,
                "--inflight" => o.inflight = value(a)? as usize,
                "--get-inflight" => o.get_inflight = value(a)? as usize,
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
                "--ucx-tls" | "--ucx-set" | "--ucx-shm-tls" => {
                    let v = it
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))?;
                    o.raw.extend([a.clone(), v.clone()]);
                    if a == "--ucx-tls" {
                        o.ucx.tls = v.clone();
                    } else if a == "--ucx-shm-tls" {
                        o.ucx_shm_tls = v.clone();
                    } else {
                        let (name, val) = v
                            .split_once('=')
                            .ok_or_else(|| anyhow::anyhow!("--ucx-set NAME=VALUE, found {v}"))?;
                        o.ucx.settings.push((name.to_string(), val.to_string()));
                    }
                }
                "--ucx-copy-thread" => {
                    o.ucx.copy_thread = true;
                    o.raw.push(a.clone());
                }
                "--skip-stock" => {
                    o.skip_stock = true;
                    o.raw.push(a.clone());
                }
                // cargo bench passes `--bench`.
                "--bench" => {}
                other => anyhow::bail!("unknown transport bench option {other:?}"),
            }
        }
        anyhow::ensure!(o.blocks > 0, "--blocks: expected at least 1, found 0");
        anyhow::ensure!(o.rounds > 0, "--rounds: expected at least 1, found 0");
        anyhow::ensure!(o.inflight > 0, "--inflight: expected at least 1, found 0");
        anyhow::ensure!(
            o.get_inflight > 0,
            "--get-inflight: expected at least 1, found 0"
        );
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

    /// The tuned config fetching in UCX get mode over `tls`, staging leases or not.
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) fn ucx_get(&self, tls: &str, stage_leases: bool) -> TransportConfig {
        let mut config = self.tuned();
        config.fetches_in_flight_max = self.get_inflight;
        config.ucx.mode = crate::UcxMode::Get;
        config.ucx.tls = tls.to_string();
        config.ucx.stage_leases = stage_leases;
        config
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
