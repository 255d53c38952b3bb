//! Command-line knobs shared by the bench's processes (the parent forwards its own), and the
//! internal ones by which it tells a child what it is (`--serve`, `--bind`, `--veth-client`).

use std::net::IpAddr;
use std::path::PathBuf;

use kvfabric_store::BlockId;

use crate::{QuicTuning, TransportConfig, UcxTuning};

/// What a veth client process is told by its parent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VethClient {
    /// The certificates' directory.
    pub(crate) dir: PathBuf,
    /// The server process, whose CPU time it measures.
    pub(crate) server_pid: u32,
    /// The server's blocks.
    pub(crate) ids: Vec<BlockId>,
    /// The server's addresses, as its `ready` line gave them.
    pub(crate) addrs: Vec<String>,
}

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
    /// `--bind IP`: the server's address (127.0.0.1 unless given).
    pub(crate) bind: Option<IpAddr>,
    /// `--veth-client DIR --server-pid PID --ids HEX,… --addrs A,B,C,D`: be the measuring
    /// client inside the veth client namespace.
    pub(crate) veth_client: Option<VethClient>,
    /// `--no-veth`: measure loopback only.
    pub(crate) no_veth: bool,
    /// `--veth-only`: measure the veth rows only.
    pub(crate) veth_only: bool,
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
            bind: None,
            veth_client: None,
            no_veth: false,
            veth_only: false,
            raw: Vec::new(),
        };
        let (mut client_dir, mut server_pid, mut ids, mut addrs) = (None, None, None, None);
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
                "--bind" | "--veth-client" | "--server-pid" | "--ids" | "--addrs" => {
                    let v = it
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))?;
                    match a.as_str() {
                        "--bind" => {
                            o.bind = Some(v.parse().map_err(|e| {
                                anyhow::anyhow!("--bind: expected an IP address, found {v:?}: {e}")
                            })?)
                        }
                        "--veth-client" => client_dir = Some(PathBuf::from(v)),
                        "--server-pid" => {
                            server_pid = Some(v.parse::<u32>().map_err(|e| {
                                anyhow::anyhow!("--server-pid: expected a pid, found {v:?}: {e}")
                            })?)
                        }
                        "--ids" => {
                            ids = Some(
                                v.split(',')
                                    .map(BlockId::from_hex)
                                    .collect::<Result<Vec<_>, _>>()?,
                            )
                        }
                        _ => addrs = Some(v.split(',').map(str::to_string).collect::<Vec<_>>()),
                    }
                }
                "--no-veth" => o.no_veth = true,
                "--veth-only" => o.veth_only = true,
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
                "--no-adapt" => {
                    o.tuning.adapt_to_path = false;
                    o.raw.push(a.clone());
                }
                "--no-join" => {
                    o.tuning.join_sends = false;
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
        match (client_dir, server_pid, ids, addrs) {
            (None, None, None, None) => {}
            (Some(dir), Some(server_pid), Some(ids), Some(addrs)) => {
                anyhow::ensure!(
                    addrs.len() == 4,
                    "--addrs: expected 4 addresses (QUIC tuned, QUIC stock, TCP, TLS-TCP), found {}",
                    addrs.len()
                );
                o.veth_client = Some(VethClient {
                    dir,
                    server_pid,
                    ids,
                    addrs,
                });
            }
            _ => anyhow::bail!(
                "--veth-client, --server-pid, --ids and --addrs go together (the bench passes them to its own client process)"
            ),
        }
        anyhow::ensure!(
            !(o.no_veth && o.veth_only),
            "--no-veth and --veth-only: expected one of them at most, found both"
        );
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
    /// max UDP payload, 1.25 MB stream window, 10 MB send window, OS socket buffers, 333 ms
    /// initial RTT.
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
                initial_rtt_ms: 333,
                join_sends: false,
                adapt_to_path: false,
            },
            ..TransportConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> anyhow::Result<Opts> {
        Opts::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_and_path_options() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.blocks, o.rounds, o.inflight), (16, 20, 1));
        assert!(!o.no_veth && !o.veth_only && o.bind.is_none() && o.veth_client.is_none());
        assert!(o.tuning.adapt_to_path && !o.stock().quic.adapt_to_path);
        let o = parse(&["--no-veth", "--blocks", "2", "--rounds", "2"]).unwrap();
        assert!(o.no_veth);
        // Only the measuring options travel to the children, not the path choice.
        assert_eq!(o.raw, ["--blocks", "2", "--rounds", "2"]);
        assert!(parse(&["--veth-only"]).unwrap().veth_only);
        let err = parse(&["--no-veth", "--veth-only"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("found both"), "{err}");
    }

    #[test]
    fn tuning_options_reach_the_config() {
        let o = parse(&["--mtu", "1400", "--max-udp", "1472", "--gso", "--no-mtud"]).unwrap();
        let q = o.tuned().quic;
        assert_eq!((q.initial_mtu_bytes, q.max_udp_payload_bytes), (1400, 1472));
        assert!(q.segmentation_offload && !q.mtu_discovery);
        assert!(parse(&["--mtu"])
            .unwrap_err()
            .to_string()
            .contains("needs a value"));
        assert!(parse(&["--mtu", "big"])
            .unwrap_err()
            .to_string()
            .contains("expected a number"));
        assert!(parse(&["--inflight", "0"]).is_err());
        assert!(parse(&["--bogus"])
            .unwrap_err()
            .to_string()
            .contains("--bogus"));
    }

    #[test]
    fn the_internal_options_of_the_children() {
        let id = "ab".repeat(32);
        let o = parse(&[
            "--veth-client",
            "/tmp/x",
            "--server-pid",
            "7",
            "--ids",
            &format!("{id},{id}"),
            "--addrs",
            "10.0.0.1:1,10.0.0.1:2,10.0.0.1:3,10.0.0.1:4",
        ])
        .unwrap();
        let c = o.veth_client.expect("a veth client");
        assert_eq!((c.server_pid, c.ids.len(), c.addrs.len()), (7, 2, 4));
        assert!(o.raw.is_empty());
        let err = parse(&["--veth-client", "/tmp/x"]).unwrap_err().to_string();
        assert!(err.contains("go together"), "{err}");
        assert_eq!(
            parse(&["--bind", "10.201.0.1"]).unwrap().bind,
            Some("10.201.0.1".parse().unwrap())
        );
        assert!(parse(&["--bind", "nowhere"])
            .unwrap_err()
            .to_string()
            .contains("--bind"));
    }
}
