//! The GPU tier in the node's path, over the device tier on host memory
//! (`kvfabric_store::tier::device::HostMemory`, the store's `testing` feature): where a put and
//! a hit land by the GPU policy, what a read serves, and that a damaged device copy is never
//! served. The same node code over CUDA memory runs in `crates/node/tests/gpu_device.rs`
//! (ignored: it needs a device).

use kvfabric_store::tier::device::{DeviceTier, HostMemory};
use kvfabric_store::{Blake3Ids, GpuConfig, GpuPolicy, Store};

use super::*;

/// A block of `g` as a tier places it (64-byte aligned).
fn placed(g: &ModelGeometry) -> u64 {
    block_bytes(g).div_ceil(64) * 64
}

/// A node whose GPU tier holds `gpu_blocks` blocks of `g` and whose host tier holds
/// `host_blocks`, with `policy`; and the device memory under its GPU tier.
fn gpu_node(
    g: &ModelGeometry,
    gpu_blocks: u64,
    host_blocks: u64,
    policy: GpuPolicy,
    ns: NamespaceKey,
) -> (Arc<LocalNode>, HostMemory) {
    let b = placed(g);
    let memory = HostMemory::default();
    let device = DeviceTier::new(memory.clone(), ByteCount(b * gpu_blocks), b * gpu_blocks);
    let config = StoreConfig {
        gpu: Some(GpuConfig {
            ordinal: 0,
            capacity: ByteCount(b * gpu_blocks),
            policy,
        }),
        ..StoreConfig::host_only(ByteCount(b * host_blocks))
    };
    let store = Store::open_with(config, Box::new(Blake3Ids), Some(Box::new(device))).unwrap();
    let node = LocalNode::open_store(store, &[ns], None).unwrap().0;
    (Arc::new(node), memory)
}

fn blocks_in(node: &LocalNode, tier: Tier) -> u64 {
    let s = node.snapshot().unwrap();
    s.usage
        .iter()
        .find(|u| u.tier == tier)
        .map_or(0, |u| u.blocks)
}

const PUTS_ONLY: GpuPolicy = GpuPolicy {
    puts: true,
    promote: false,
};
const HITS_ONLY: GpuPolicy = GpuPolicy {
    puts: false,
    promote: true,
};
const NEITHER: GpuPolicy = GpuPolicy {
    puts: false,
    promote: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_lands_on_the_gpu_and_reads_back_verified() {
    let (g, ns) = (tiny(), NamespaceKey::derive("a"));
    let (node, _) = gpu_node(&g, 2, 4, GpuPolicy::default(), ns);
    let bytes = payload(&g, 1);
    let s = put(&node, ns, &g, &bytes, None).await;
    assert_eq!(s.tier, Tier::Gpu, "the put's answer names the GPU tier");
    assert_eq!(
        (blocks_in(&node, Tier::Gpu), blocks_in(&node, Tier::Host)),
        (1, 0)
    );
    assert_eq!(read_back(&node, &[ns], &s.id), Some((bytes, Tier::Gpu)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_gpu_moves_its_victim_to_host_and_a_host_hit_moves_back_up() {
    let (g, ns) = (tiny(), NamespaceKey::derive("a"));
    let (node, _) = gpu_node(&g, 2, 4, GpuPolicy::default(), ns);
    let bytes: Vec<Vec<u8>> = (0..3).map(|i| payload(&g, i)).collect();
    let mut ids = Vec::new();
    for b in &bytes {
        let s = put(&node, ns, &g, b, None).await;
        assert_eq!(s.tier, Tier::Gpu, "each new put takes the device");
        ids.push(s.id);
    }
    assert_eq!(
        (blocks_in(&node, Tier::Gpu), blocks_in(&node, Tier::Host)),
        (2, 1)
    );
    let on_host = ids
        .iter()
        .position(|id| node.head(&[ns], id).unwrap().unwrap().0 == Tier::Host)
        .expect("one block was moved down");
    let promotions = node.snapshot().unwrap().counters.promotions;
    // Served from host, then moved up; a device victim went down in its place.
    assert_eq!(
        read_back(&node, &[ns], &ids[on_host]),
        Some((bytes[on_host].clone(), Tier::Host))
    );
    assert_eq!(
        node.head(&[ns], &ids[on_host]).unwrap().unwrap().0,
        Tier::Gpu
    );
    assert_eq!(node.snapshot().unwrap().counters.promotions, promotions + 1);
    assert_eq!(
        (blocks_in(&node, Tier::Gpu), blocks_in(&node, Tier::Host)),
        (2, 1)
    );
    for (id, b) in ids.iter().zip(&bytes) {
        assert_eq!(
            read_back(&node, &[ns], id).unwrap().0,
            *b,
            "every block reads back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_decides_what_goes_up() {
    let (g, ns) = (tiny(), NamespaceKey::derive("a"));
    for (policy, put_tier, second_read) in [
        (PUTS_ONLY, Tier::Gpu, Tier::Gpu),
        (HITS_ONLY, Tier::Host, Tier::Gpu),
        (NEITHER, Tier::Host, Tier::Host),
    ] {
        let (node, _) = gpu_node(&g, 2, 4, policy, ns);
        let bytes = payload(&g, 7);
        let s = put(&node, ns, &g, &bytes, None).await;
        assert_eq!(s.tier, put_tier, "{policy:?}: the put");
        let first = read_back(&node, &[ns], &s.id).unwrap();
        assert_eq!(
            first,
            (bytes.clone(), put_tier),
            "{policy:?}: the first read"
        );
        let second = read_back(&node, &[ns], &s.id).unwrap();
        assert_eq!(second, (bytes, second_read), "{policy:?}: the second read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_device_copy_is_never_served() {
    let (g, ns) = (tiny(), NamespaceKey::derive("a"));
    let (node, memory) = gpu_node(&g, 2, 4, GpuPolicy::default(), ns);
    let s = put(&node, ns, &g, &payload(&g, 3), None).await;
    assert_eq!(s.tier, Tier::Gpu);
    // The only block on the device sits at the start of its first region.
    memory.flip(0, HEADER_LEN as u64 + 10);
    assert_eq!(read_back(&node, &[ns], &s.id), None, "not served");
    assert_eq!(node.head(&[ns], &s.id).unwrap(), None, "and no longer held");
    let snap = node.snapshot().unwrap();
    assert_eq!(snap.counters.verify_failures, 1);
    let gpu = snap.usage.iter().find(|u| u.tier == Tier::Gpu).unwrap();
    assert_eq!(
        (gpu.blocks, gpu.used),
        (0, ByteCount(0)),
        "its device room is free"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_placed_on_the_gpu_is_published_as_stored_there() {
    use crate::events::{EventKind, EventLog, EventMetrics};
    let (g, ns) = (tiny(), NamespaceKey::derive("a"));
    for (policy, tier) in [(GpuPolicy::default(), Tier::Gpu), (NEITHER, Tier::Host)] {
        let (node, _) = gpu_node(&g, 2, 4, policy, ns);
        let log = Arc::new(EventLog::new(
            crate::ids::NodeId(1),
            1,
            4,
            EventMetrics::default(),
        ));
        node.attach_events(log.clone()).unwrap();
        let s = put(&node, ns, &g, &payload(&g, 1), None).await;
        assert_eq!(s.tier, tier, "{policy:?}");
        let stored: Vec<(Tier, Vec<kvfabric_store::BlockId>)> = log
            .buffered_from(1)
            .iter()
            .flat_map(|b| b.events.clone())
            .filter_map(|e| match e {
                EventKind::Stored { tier, ids, .. } => Some((tier, ids)),
                _ => None,
            })
            .collect();
        assert_eq!(stored, vec![(tier, vec![s.id])], "{policy:?}");
    }
}
