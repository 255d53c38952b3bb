//! Config validation: the shipped configs load, and every mistake names its file and key.

use std::path::Path;

use kvfabric_store::{ByteCount, GpuPolicy};

use super::*;

const GOOD: &str = r#"
[node]
id = 4
http_listen = "127.0.0.1:0"
data_dir = "data/n4"

[tiers]
host_bytes = "64 MiB"
[tiers.disk]
bytes = "256 MiB"

[[namespaces]]
name = "a"
[[namespaces]]
name = "docs"
shared = true

[[tenants]]
token = "token-for-tenant-a"
namespace = "a"
"#;

fn parse_str(text: &str) -> Result<Loaded, ConfigError> {
    parse("test.toml", Path::new("/etc/kvfabric"), text)
}

/// The key and reason of the error `text` gets.
fn rejected(text: &str) -> (String, String) {
    match parse_str(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            assert_eq!(e.file, "test.toml");
            (e.key, e.reason)
        }
    }
}

#[test]
fn a_good_config_loads_with_derived_defaults() {
    let c = parse_str(GOOD).unwrap();
    let cfg = &c.config;
    assert_eq!(cfg.node_id.to_string(), "n4");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(cfg.worker_threads, cores.max(2), "one per core, at least 2");
    assert_eq!(
        cfg.data_dir,
        Path::new("/etc/kvfabric/data/n4"),
        "relative to the file"
    );
    let disk = cfg.store.disk.as_ref().unwrap();
    assert_eq!(disk.dir, Path::new("/etc/kvfabric/data/n4/disk"));
    assert_eq!(disk.segment_bytes, 32 << 20, "an eighth of the tier");
    assert_eq!(
        cfg.limits.max_body_bytes,
        c.catalog.largest_block_bytes().unwrap(),
        "largest storable block with its header"
    );
    assert_eq!(cfg.limits.max_inflight_requests, 64);
    assert_eq!(cfg.namespaces.len(), 2);
    assert_eq!(cfg.tenants[0].namespace, 0);
    assert!(
        !format!("{:?}", cfg.tenants).contains("token-for"),
        "tokens never print"
    );
}

#[test]
fn the_shipped_cluster_configs_load_and_do_not_collide() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    // The configs name /tmp/kvfabric/certs; the test points them at certificates of its own.
    let certs = tempfile::tempdir().unwrap();
    kvfabric_transport::generate_cluster(certs.path(), 3).unwrap();
    let loaded: Vec<NodeConfig> = (1..=3)
        .map(|i| {
            let file = dir.join(format!("node{i}.toml"));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.contains("certs_dir = \"/tmp/kvfabric/certs\""));
            let text = text.replace("/tmp/kvfabric/certs", &certs.path().display().to_string());
            parse(&file.display().to_string(), &dir, &text)
                .unwrap()
                .config
        })
        .collect();
    let clusters: Vec<&ClusterConfig> =
        loaded.iter().map(|c| c.cluster.as_ref().unwrap()).collect();
    for c in &clusters {
        assert_eq!(
            c.members, clusters[0].members,
            "every node lists the same members"
        );
        assert_eq!(c.replication, 2);
    }
    for (i, a) in loaded.iter().enumerate() {
        for b in &loaded[i + 1..] {
            assert_ne!(a.node_id, b.node_id);
            assert_ne!(a.http_listen, b.http_listen);
            assert_ne!(a.data_dir, b.data_dir);
            let (ca, cb) = (a.cluster.as_ref().unwrap(), b.cluster.as_ref().unwrap());
            assert_ne!(ca.transport_listen, cb.transport_listen);
            assert_ne!(ca.raft_listen, cb.raft_listen);
        }
    }
}

#[test]
fn unknown_and_missing_keys_are_named() {
    let (key, reason) = rejected(&GOOD.replace("[tiers]", "[tiers]\nhost_byte = 1"));
    assert_eq!(key, "tiers.host_byte");
    assert!(reason.contains("unknown field"), "{reason}");
    let (key, reason) = rejected(&GOOD.replace("id = 4\n", ""));
    assert_eq!(key, "node.id");
    assert!(reason.contains("missing field"), "{reason}");
    let (key, _) = rejected(&format!("{GOOD}\n[peers]\nx = 1\n"));
    assert_eq!(key, "peers", "no section exists before its feature");
}

#[test]
fn bad_values_are_named_with_a_reason() {
    let cases = [
        ("id = 4", "id = 0", "node.id"),
        ("\"127.0.0.1:0\"", "\"localhost\"", "node.http_listen"),
        ("\"64 MiB\"", "\"64 MB\"", "tiers.host_bytes"),
        ("\"64 MiB\"", "1024", "tiers.host_bytes"),
        ("\"256 MiB\"", "100", "tiers.disk.bytes"),
        (
            "bytes = \"256 MiB\"",
            "bytes = \"256 MiB\"\nsync = \"often\"",
            "tiers.disk.sync",
        ),
        (
            "data_dir = \"data/n4\"",
            "data_dir = \"data/n4\"\nlog_level = \"[[\"",
            "node.log_level",
        ),
        (
            "data_dir = \"data/n4\"",
            "data_dir = \"data/n4\"\nworker_threads = 0",
            "node.worker_threads",
        ),
        (
            "data_dir = \"data/n4\"",
            "data_dir = \"data/n4\"\nworker_threads = 1025",
            "node.worker_threads",
        ),
        (
            "token = \"token-for-tenant-a\"",
            "token = \"short\"",
            "tenants[0].token",
        ),
        (
            "namespace = \"a\"",
            "namespace = \"b\"",
            "tenants[0].namespace",
        ),
        ("name = \"a\"", "name = \"A\"", "namespaces[0].name"),
    ];
    for (from, to, key) in cases {
        let text = GOOD.replacen(from, to, 1);
        assert_ne!(text, GOOD, "{from}");
        let (k, reason) = rejected(&text);
        assert_eq!(k, key, "{to}: {reason}");
        assert!(!reason.is_empty());
    }
}

#[test]
fn fields_are_checked_against_each_other() {
    let limits = |l: &str| format!("{GOOD}\n[limits]\n{l}\n");
    let (key, _) = rejected(&limits("max_body_bytes = 10"));
    assert_eq!(key, "limits.max_body_bytes");
    let (key, _) = rejected(&limits("max_connections = 4\nmax_inflight_requests = 5"));
    assert_eq!(key, "limits.max_inflight_requests");
    let (key, _) = rejected(&limits("body_read_timeout_ms = 0"));
    assert_eq!(key, "limits.body_read_timeout_ms");
    let two = GOOD.replace(
        "[[tenants]]",
        "[[tenants]]\ntoken = \"token-for-tenant-a\"\nnamespace = \"docs\"\n[[tenants]]",
    );
    let (key, reason) = rejected(&two);
    assert_eq!(key, "tenants[1].token");
    assert!(reason.contains("two tenants"), "{reason}");
    let unused = GOOD.replace("[[tenants]]", "[[namespaces]]\nname = \"b\"\n[[tenants]]");
    let (key, _) = rejected(&unused);
    assert_eq!(key, "namespaces[2].name");
    let no_tenants = GOOD[..GOOD.find("[[tenants]]").unwrap()].to_owned();
    let (key, _) = rejected(&no_tenants);
    assert_eq!(key, "tenants");
    let (key, _) = rejected(&format!("{GOOD}\n[models]\ndir = \"/no/such/dir\"\n"));
    assert_eq!(key, "models.dir");
}

#[test]
fn an_open_node_needs_no_tenancy() {
    let open = GOOD[..GOOD.find("[[namespaces]]").unwrap()].to_owned();
    let c = parse_str(&open).unwrap();
    assert!(c.config.tenants.is_empty() && c.config.namespaces.is_empty());
    assert!(c.config.store.disk.is_some());
}

/// A cluster config of node 1 with `extra` appended to `[cluster]` and certificates in `certs`.
fn cluster_text(certs: &Path, extra: &str, members: &str) -> String {
    format!(
        "{GOOD}\n[cluster]\ncerts_dir = {:?}\n{extra}\n{members}",
        certs.display().to_string()
    )
}

const TWO: &str = r#"
[[cluster.members]]
id = 4
api = "http://127.0.0.1:7104"
transport = "127.0.0.1:7204"
raft = "127.0.0.1:7304"
[[cluster.members]]
id = 5
api = "http://127.0.0.1:7105"
transport = "127.0.0.1:7205"
raft = "127.0.0.1:7305"
"#;

#[test]
fn a_cluster_section_loads_with_defaults_mapped_onto_the_directory() {
    let certs = tempfile::tempdir().unwrap();
    kvfabric_transport::generate_cluster(certs.path(), 5).unwrap();
    let c = parse_str(&cluster_text(
        certs.path(),
        "lease_ms = 6000\nbatch_delay_ms_max = 7\nbatch_inflight_max = 3\npreappend = false",
        TWO,
    ))
    .unwrap()
    .config;
    let cl = c.cluster.unwrap();
    assert_eq!(cl.replication, 2, "two members: two copies by default");
    assert_eq!(cl.cert_name, "node4");
    assert_eq!(cl.transport_listen.port(), 7204);
    assert_eq!(cl.raft_listen.port(), 7304);
    assert_eq!(cl.directory.lease_ms, 6000);
    assert_eq!(cl.directory.batch_delay_ms_max, 7);
    assert_eq!(cl.directory.batch_inflight_max, 3);
    assert!(!cl.directory.preappend);
    assert_eq!(cl.lease_renew.as_millis(), 1500, "a quarter of the lease");
    assert_eq!(cl.members.len(), 2);

    let alone = r#"
[[cluster.members]]
id = 4
api = "http://127.0.0.1:7104"
transport = "127.0.0.1:7204"
raft = "127.0.0.1:7304"
"#;
    let c = parse_str(&cluster_text(certs.path(), "", alone))
        .unwrap()
        .config;
    assert_eq!(c.cluster.unwrap().replication, 1, "alone: one copy");
}

#[test]
fn cluster_mistakes_are_named_with_a_reason() {
    let certs = tempfile::tempdir().unwrap();
    kvfabric_transport::generate_cluster(certs.path(), 5).unwrap();
    let other = TWO.replace("id = 4", "id = 6");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            cluster_text(certs.path(), "", &other),
            "cluster.members",
            "among the members",
        ),
        (
            cluster_text(certs.path(), "replication = 3", TWO),
            "cluster.replication",
            "found 3",
        ),
        (
            cluster_text(certs.path(), "replication = 0", TWO),
            "cluster.replication",
            "found 0",
        ),
        (
            cluster_text(certs.path(), "raft_listen = \"127.0.0.1:9\"", TWO),
            "cluster.raft_listen",
            "advertises",
        ),
        (
            cluster_text(certs.path(), "cert_name = \"node5\"", TWO),
            "cluster.cert_name",
            "node4",
        ),
        (
            cluster_text(certs.path(), "lease_renew_ms = 9000", TWO),
            "cluster.lease_renew_ms",
            "found 9000",
        ),
        (
            cluster_text(certs.path(), "batch_inflight_max = 0", TWO),
            "cluster.batch_inflight_max",
            "found 0",
        ),
        (
            cluster_text(certs.path(), "election_timeout_min_ms = 2000", TWO),
            "cluster.election_timeout_max_ms",
            "2000",
        ),
        (
            cluster_text(certs.path(), "", &TWO.replace("id = 5", "id = 4")),
            "cluster.members[1].id",
            "twice",
        ),
        (
            cluster_text(
                certs.path(),
                "",
                &TWO.replace("127.0.0.1:7305", "localhost"),
            ),
            "cluster.members[1].raft",
            "IP:PORT",
        ),
        (
            cluster_text(
                certs.path(),
                "",
                &TWO.replace("http://127.0.0.1:7105", "127.0.0.1:7105"),
            ),
            "cluster.members[1].api",
            "http://",
        ),
        (cluster_text(certs.path(), "", ""), "cluster.members", ""),
    ];
    for (text, key, reason) in cases {
        let (k, r) = rejected(&text);
        assert_eq!(k, key, "{r}");
        assert!(r.contains(reason), "{key}: {r}");
    }
    let empty = tempfile::tempdir().unwrap();
    let (k, r) = rejected(&cluster_text(empty.path(), "", TWO));
    assert_eq!(k, "cluster.certs_dir");
    assert!(r.contains("ca.pem") && r.contains("kvfabric certs"), "{r}");
}

/// What the shared config writer (`kvfabric_test_support::config`, used by `cluster up`, the
/// tests and the chaos harness) writes is what this parser reads, every section it can set.
#[test]
fn the_shared_config_writer_writes_what_the_node_reads() {
    use kvfabric_test_support::config::{
        ClusterSection, DiskSection, EventsSection, LimitsSection, MemberSection, NamespaceSection,
        NodeConfigFile, RouteSection, TenantSection,
    };
    let mut c = NodeConfigFile::new(2, "127.0.0.1:0", "data".into(), "64 MiB".into());
    c.node.log_level = Some("debug".into());
    c.node.worker_threads = Some(3);
    c.tiers.disk = Some(DiskSection {
        sync: Some("every_append".into()),
        ..DiskSection::of(64u64 << 20)
    });
    c.limits = Some(LimitsSection {
        max_lookup_keys: Some(7),
        ..LimitsSection::default()
    });
    c.namespaces = vec![NamespaceSection {
        name: "a".into(),
        shared: true,
    }];
    c.tenants = vec![TenantSection {
        token: "a-token-of-sixteen-chars".into(),
        namespace: "a".into(),
    }];
    c.events = Some(EventsSection {
        ring_batches: Some(5),
        ..EventsSection::default()
    });
    c.route = Some(RouteSection {
        prefill_tokens_per_s: Some(1000.0),
        ..RouteSection::default()
    });
    let member = |id: u64| MemberSection {
        id,
        api: format!("http://127.0.0.1:{}", 7100 + id),
        transport: format!("127.0.0.1:{}", 7200 + id).parse().unwrap(),
        raft: format!("127.0.0.1:{}", 7300 + id).parse().unwrap(),
    };
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("generate_dev_certs".to_owned(), toml::Value::Boolean(true));
    extra.insert("repair_interval_ms".to_owned(), toml::Value::Integer(700));
    c.cluster = Some(ClusterSection {
        certs_dir: "certs".into(),
        transport_listen: None,
        raft_listen: None,
        replication: Some(3),
        lease_ms: Some(4000),
        extra,
        members: (1..=3).map(member).collect(),
    });
    let loaded = parse_str(&c.to_toml("round trip")).unwrap();
    let n = loaded.config;
    assert_eq!(n.node_id, NodeId(2));
    assert_eq!(n.log_level, "debug");
    assert_eq!(n.worker_threads, 3);
    assert_eq!(n.limits.max_lookup_keys, 7);
    assert_eq!(n.events.ring_batches, 5);
    assert_eq!(n.route.prefill_tokens_per_s, 1000.0);
    assert_eq!(n.namespaces.len(), 1);
    assert!(n.namespaces[0].shared);
    let cluster = n.cluster.expect("[cluster]");
    assert_eq!(cluster.replication, 3);
    assert_eq!(cluster.directory.lease_ms, 4000);
    assert_eq!(
        cluster.repair_interval,
        Some(std::time::Duration::from_millis(700))
    );
    assert_eq!(cluster.members.len(), 3);
}

#[test]
fn the_operator_token_is_optional_bounded_and_its_own() {
    assert!(parse_str(GOOD).unwrap().config.operator.is_none());
    let with = |extra: &str| parse_str(&format!("{GOOD}{extra}"));
    let c = with("[operator]\ntoken = \"operator-token-0123456\"\n").unwrap();
    assert_eq!(
        c.config.operator.as_ref().unwrap().0,
        "operator-token-0123456"
    );
    assert!(
        !format!("{:?}", c.config.operator).contains("0123456"),
        "the token is never printed"
    );
    for (extra, reason) in [
        ("[operator]\ntoken = \"short\"\n", "16 to 256 visible ASCII"),
        (
            "[operator]\ntoken = \"has a space in it ok\"\n",
            "visible ASCII",
        ),
        (
            "[operator]\ntoken = \"token-for-tenant-a\"\n",
            "one a tenant has",
        ),
    ] {
        let (key, why) = rejected(&format!("{GOOD}{extra}"));
        assert_eq!(key, "operator.token");
        assert!(why.contains(reason), "{why}");
    }
    let e = with("[operator]\ntoken = \"operator-token-0123456\"\nx = 1\n")
        .expect_err("unknown keys are refused");
    assert!(e.to_string().contains('x'), "{e}");
}

#[test]
fn arena_bounds_default_and_are_checked_against_the_hybrid_presets() {
    let c = parse_str(GOOD).unwrap().config;
    assert_eq!(c.arenas.arenas_max, 64);
    assert_eq!(c.arenas.bytes_max.0, 1 << 30);
    let c = parse_str(&format!(
        "{GOOD}\n[arenas]\narenas_max = 3\nbytes_max = \"16 MiB\"\n"
    ))
    .unwrap()
    .config;
    assert_eq!((c.arenas.arenas_max, c.arenas.bytes_max.0), (3, 16 << 20));
    let (key, reason) = rejected(&format!("{GOOD}\n[arenas]\narenas_max = 0\n"));
    assert_eq!(key, "arenas.arenas_max");
    assert!(reason.contains("found 0"), "{reason}");
    // Less than one V4-Pro arena (the largest of the embedded hybrid presets): no V4-Pro
    // request could ever get one.
    let (key, reason) = rejected(&format!("{GOOD}\n[arenas]\nbytes_max = 6852095\n"));
    assert_eq!(key, "arenas.bytes_max");
    assert!(
        reason.contains("deepseek-v4-pro") && reason.contains("6852096 B"),
        "{reason}"
    );
    let (key, reason) = rejected(&format!("{GOOD}\n[arenas]\nwindow = 3\n"));
    assert_eq!(key, "arenas.window");
    assert!(reason.contains("unknown field"), "{reason}");
}

#[test]
fn the_gpu_section_takes_its_policy_with_defaults() {
    let gpu = |extra: &str| {
        let text = GOOD.replacen(
            "[[namespaces]]",
            &format!("[tiers.gpu]\nbytes = \"1 GiB\"\n{extra}\n[[namespaces]]"),
            1,
        );
        parse_str(&text).unwrap().config.store.gpu.unwrap()
    };
    let g = gpu("");
    assert_eq!((g.ordinal, g.capacity), (0, ByteCount(1 << 30)));
    assert_eq!(g.policy, GpuPolicy::default());
    assert!(g.policy.puts && g.policy.promote, "both by default");
    let g = gpu("ordinal = 1\nputs = false");
    assert_eq!(g.ordinal, 1);
    assert_eq!(
        g.policy,
        GpuPolicy {
            puts: false,
            promote: true
        }
    );
    assert!(!gpu("promote = false").policy.promote);
    let text = GOOD.replacen(
        "[[namespaces]]",
        "[tiers.gpu]\nbytes = \"1 GiB\"\nputs = \"yes\"\n[[namespaces]]",
        1,
    );
    assert_eq!(rejected(&text).0, "tiers.gpu.puts");
}
