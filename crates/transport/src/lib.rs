//! kvfabric's transport: moving sealed blocks between nodes, verified on receipt.
//!
//! Owns: the [`Transport`] trait (fetch one or many blocks from a peer, fall back across
//! owners; serve from a [`BlockSource`]) and its conformance suite ([`conformance`]); the
//! wire frame ([`frame`], sans-IO, fuzzed); streaming verification on receipt ([`receive`]);
//! the QUIC implementation ([`quic`]: quinn, mutual TLS with a cluster CA from [`certs`]);
//! the bounds ([`TransportConfig`]) and counters ([`TransportCounters`]) of one instance.
//! UCX and RDMA verbs will implement the same trait behind features.
//!
//! Must never: hand out bytes that did not hash to the id asked for (only a
//! [`VerifiedBlock`] leaves a fetch); install anything partial (a failed fetch drops its
//! buffer); trust a peer's frame before checking it; hold more than its config allows;
//! know about Raft or the directory.
//!
//! # Wire
//!
//! A fetch is one bidirectional QUIC stream: the client sends a [`frame::FrameHeader`] of kind
//! `Fetch` and ends its side; the server answers with a `Block` header and the block's bytes
//! (header ‖ payload, as the store holds them, never re-encoded), or `NotFound` /
//! `Unavailable`, and ends its side. The header carries the namespace key, so the receiver
//! hashes under the right key; the byte table is in [`frame`].
//!
//! # QUIC throughput on loopback: what mattered
//!
//! Measured with `cargo bench -p kvfabric-transport --bench bench_transport`: 4.5 MB blocks
//! (DeepSeek-V3 BF16), client and server in two processes on one 2-core VM, one tokio worker
//! each; every phase alternates with the TCP baseline in the same run. Run-to-run noise on this
//! VM is about ±20%, so only effects larger than that are claimed.
//!
//! | setting (ranges over several runs) | verified GB/s | × TCP | CPU s/GB |
//! |---|---:|---:|---:|
//! | quinn's stock MTU (1,472 B), windows and GSO | 0.57–0.88 | 0.18–0.35 | 2.1–2.9 |
//! | 64 KiB datagrams with GSO on (fails: see 2.) | 0.39–0.78 | 0.20–0.23 | 2.3–2.9 |
//! | 6.5 KB datagrams with GSO | 0.86–1.23 | 0.33–0.39 | 1.16–1.33 |
//! | **64 KiB datagrams, GSO off (the defaults)** | 1.05–1.81 | 0.29–0.52 | 0.85–0.97 |
//! | the same, unverified (what the hash costs) | 1.39–2.95 | 0.38–0.91 | 0.66–0.72 |
//!
//! 1. **Datagram size** is what mattered. Per-packet costs (syscalls, header protection, ACKs,
//!    task wake-ups) dominate at 1,472 bytes. Loopback carries 65,527-byte UDP payloads;
//!    `max_udp_payload_bytes = 65527` with MTU discovery reaches 65,495 within a few round
//!    trips (starting at 1,200), cutting CPU per GB by 2.5–3×. (`initial_mtu_bytes = 65000`
//!    made the handshake time out; starting at 1,200 and discovering works.)
//! 2. **GSO must be off with large datagrams.** quinn 0.11 batches up to ten datagrams of the
//!    path MTU per GSO send; ten 64 KiB datagrams exceed the kernel's 64 KiB GSO limit, the
//!    send fails, quinn declares a black hole and falls back to 1,200-byte packets
//!    (`black_holes_detected: 1`, `current_mtu: 1200` in its path statistics).
//!    [`TransportConfig::validate`] refuses GSO with `max_udp_payload_bytes` above
//!    [`config::GSO_PAYLOAD_BYTES_MAX`]; on a 1,500-byte-MTU network, GSO with 1,472-byte
//!    datagrams is the right choice.
//! 3. **Fewer threads, fewer blocks in flight per connection.** On two cores, one block in
//!    flight per connection and one runtime thread per process gave the lowest CPU per GB
//!    (0.88); two to four in flight or two threads per process cost 1.1–1.3 s/GB from
//!    cross-thread wake-ups and interleaved buffers, and were not faster.
//! 4. **Hash batch.** Hashing in 512 KiB batches as bytes land (still in L2) beat 32 KiB
//!    batches: 1.81 against 1.61 GB/s ([`receive::HASH_BATCH_BYTES`]).
//!
//! Not measurably different here, kept for the reasons given: stream windows of 2, 8 and 16 MiB
//! (8 MiB lets a 4.5 MB block flow without a flow-control round trip; the windows are also the
//! memory bound); `send_fairness` off (a connection finishes one block before the next, so
//! blocks complete and verify in order); AES-128-GCM preferred over AES-256-GCM (ten rounds
//! instead of fourteen; not measured separately); 4 MiB socket buffers (this VM's
//! `rmem_max`). One connection per peer (the issue asks for it); more connections could only
//! help on more cores than this machine has.
//!
//! Where the CPU goes at the defaults (perf): server — AES-GCM seal, quinn copying stream data
//! into packets, the kernel's copy from user; client — AES-GCM open, the kernel's copy to user,
//! the one copy into the destination buffer, blake3 (~0.2 s/GB, i.e. ~4.8 GB/s).

pub mod certs;
pub mod config;
pub mod conformance;
pub mod counters;
pub mod error;
pub mod frame;
pub mod peer;
pub mod quic;
pub mod receive;
pub mod source;
pub mod transport;

pub use certs::{generate_cluster, ClusterCa, ClusterFiles, NodeIdentity};
pub use config::{QuicTuning, TransportConfig};
pub use counters::{CountersSnapshot, TransportCounters};
pub use error::TransportError;
pub use frame::{FrameError, FrameHeader, FrameKind};
pub use kvfabric_store::VerifiedBlock;
pub use peer::PeerAddr;
pub use quic::QuicTransport;
pub use receive::{BlockReceiver, PayloadSink, ReceiveError};
pub use source::{BlockSource, MemorySource, SourceLookup};
pub use transport::{Fetched, Transport, TransportFuture};
