//! The GPU tier in a real node. Where it cannot run (no `cuda` feature, no driver, no device)
//! a node configured with one stops at start with the reason. On a CUDA device (a build with
//! the `cuda` feature; ignored otherwise, run by `tools/device-test`), a node's put lands on
//! the device, is served back from there byte for byte (verified on its way off the device),
//! a host hit moves up to it, and a full device moves its victims down to host memory without
//! losing or changing a byte.

mod common;

/// A GPU tier that cannot run here stops the node with the reason; nothing is served.
#[test]
fn a_gpu_tier_that_cannot_run_here_stops_the_node_with_the_reason() {
    use kvfabric_store::tier::gpu_probe::{probe, GpuProbe};
    let reason = match probe() {
        // A node that can open a device is checked by the device test below.
        GpuProbe::Available { .. } => return,
        GpuProbe::Unavailable { reason } => reason,
    };
    let (code, err) = common::kvfabric().node_exit(
        "[node]\nid = 1\nhttp_listen = \"127.0.0.1:0\"\ndata_dir = \"data\"\n\n\
         [tiers]\nhost_bytes = \"16 MiB\"\n[tiers.gpu]\nbytes = \"64 MiB\"\n",
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("gpu tier unavailable"), "{err}");
    assert!(
        err.contains(&reason),
        "the probe's reason, `{reason}`: {err}"
    );
}

/// Needs a CUDA device: `tools/device-test` (or `cargo test -p kvfabric-node --features cuda
/// --test gpu_tier -- --ignored`).
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_a_node_puts_on_the_device_and_serves_its_bytes_back() {
    use common::{payload, tiny, GpuSection, Options, TOKEN_A};
    use kvfabric_test_support::config::Bytes;

    let g = tiny();
    let gpu = |promote| GpuSection {
        bytes: Bytes::Count(64 << 20),
        ordinal: None,
        puts: Some(promote),
        promote: Some(promote),
    };
    let tier = |node: &common::TestNode, id: &str| {
        let h = node.head(Some(TOKEN_A), &format!("/v1/blocks/{id}"));
        assert_eq!(h.status, 200);
        h.header("kvfabric-tier").unwrap().to_owned()
    };
    // Default policy: the put goes to the device and is served from it.
    let node = common::kvfabric().node(Options {
        gpu: Some(gpu(true)),
        ..Options::default()
    });
    let p = payload(&g, 21);
    let put = node.put(Some(TOKEN_A), &g, &p, &[]);
    assert_eq!(put.status, 201, "{}", put.text());
    let id = put.block();
    assert_eq!(tier(&node, &id), "gpu");
    let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}"), &[]);
    assert_eq!(got.status, 200);
    assert_eq!(got.header("kvfabric-tier"), Some("gpu"));
    assert_eq!(got.body, p, "the device's bytes are the put's");
    assert!(node.metric("kvfabric_tier_blocks{node=\"n1\",tier=\"gpu\"}") >= 1.0);
    drop(node);

    // Puts stay on host, and a hit does not move them: the tier is there, unused.
    let node = common::kvfabric().node(Options {
        gpu: Some(gpu(false)),
        ..Options::default()
    });
    let id = node.put(Some(TOKEN_A), &g, &p, &[]).block();
    assert_eq!(tier(&node, &id), "host");
    let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}"), &[]);
    assert_eq!((got.body, tier(&node, &id)), (p, "host".to_owned()));
}

/// The node's `[tiers.gpu]` section with the given policy.
#[cfg(feature = "cuda")]
fn gpu_section(bytes: u64, puts: bool, promote: bool) -> common::GpuSection {
    common::GpuSection {
        bytes: kvfabric_test_support::config::Bytes::Count(bytes),
        ordinal: None,
        puts: Some(puts),
        promote: Some(promote),
    }
}

/// The tier a block is on, from `HEAD` (which moves nothing).
#[cfg(feature = "cuda")]
fn tier_of(node: &common::TestNode, id: &str) -> String {
    let h = node.head(Some(common::TOKEN_A), &format!("/v1/blocks/{id}"));
    assert_eq!(h.status, 200);
    h.header("kvfabric-tier").unwrap().to_owned()
}

/// Puts stay on host; a read of a host block moves it up to the device, from which the next
/// read is served, the same bytes.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_a_host_hit_moves_up_to_the_device() {
    use common::{payload, tiny, Options, TOKEN_A};
    let g = tiny();
    let node = common::kvfabric().node(Options {
        gpu: Some(gpu_section(64 << 20, false, true)),
        ..Options::default()
    });
    let p = payload(&g, 22);
    let id = node.put(Some(TOKEN_A), &g, &p, &[]).block();
    assert_eq!(tier_of(&node, &id), "host");
    let path = format!("/v1/blocks/{id}");
    assert_eq!(node.get(Some(TOKEN_A), &path, &[]).body, p);
    common::eventually("the hit block on the device", || {
        tier_of(&node, &id) == "gpu"
    });
    let got = node.get(Some(TOKEN_A), &path, &[]);
    assert_eq!(got.header("kvfabric-tier"), Some("gpu"));
    assert_eq!(got.body, p, "the device's bytes are the put's");
}

/// DeepSeek-V3 blocks (4.5 MB) into a device tier that holds seven: every put is acknowledged,
/// the device keeps at most what fits, its victims go down to host memory, and every block is
/// served back byte for byte, from whichever tier it is on.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_a_full_device_moves_victims_down_and_loses_nothing() {
    use common::{builtin, payload, Options, TOKEN_A};
    let g = builtin("deepseek-v3");
    let block = g.block_layout().payload_len;
    let node = common::kvfabric().node(Options {
        host_bytes: 256 << 20,
        gpu: Some(gpu_section(7 * block + block / 2, true, true)),
        ..Options::default()
    });
    let blocks: Vec<(String, Vec<u8>)> = (0..16)
        .map(|i| {
            let p = payload(&g, 100 + i);
            let put = node.put(Some(TOKEN_A), &g, &p, &[]);
            assert_eq!(put.status, 201, "{}", put.text());
            (put.block(), p)
        })
        .collect();
    let on = |tier: &str| {
        node.metric(&format!(
            "kvfabric_tier_blocks{{node=\"n1\",tier=\"{tier}\"}}"
        ))
    };
    let (gpu, host) = (on("gpu"), on("host"));
    assert!(
        (1.0..=7.0).contains(&gpu),
        "{gpu} blocks on a device that holds 7"
    );
    assert_eq!(gpu + host + on("disk"), 16.0, "every block on some tier");
    for (id, p) in &blocks {
        let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}"), &[]);
        assert_eq!(got.status, 200);
        assert!(
            got.body == *p,
            "block {id} changed on its way through the tiers"
        );
    }
    assert!(on("gpu") <= 7.0);
}
