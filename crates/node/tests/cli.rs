//! The `kvfabric` command line: `models`, the client commands against a real node, and the
//! exits of a bad config.

mod common;

use std::process::{Command, Output};

use common::{payload, tiny, Options, TOKEN_A};

fn kvfabric(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvfabric"))
        .args(args)
        .env_remove("KVFABRIC_NODE")
        .env_remove("KVFABRIC_TOKEN")
        .output()
        .expect("running kvfabric")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn models_lists_presets_with_their_geometry() {
    let o = kvfabric(&["models"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let v3 = text
        .lines()
        .find(|l| l.starts_with("deepseek-v3 "))
        .unwrap();
    for field in [
        "mla",
        "61",
        "64",
        "4497408",
        "c_kv=bf16",
        "k_rope=bf16",
        "yes",
    ] {
        assert!(v3.split_whitespace().any(|w| w == field), "{field} in {v3}");
    }
    let v4 = text
        .lines()
        .find(|l| l.starts_with("deepseek-v4-pro "))
        .unwrap();
    assert!(v4.contains("hybrid") && v4.contains("indexer=fp4"), "{v4}");
    let o = kvfabric(&["models", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["models"].as_array().unwrap().len() >= 10);
}

#[test]
fn put_get_lookup_status_round_trip_through_the_cli() {
    let node = common::kvfabric().node(Options::default());
    let g = tiny();
    let p = payload(&g, 60);
    let file = node.dir.path().join("block.bin");
    std::fs::write(&file, &p).unwrap();
    let key = "c4".repeat(32);
    let client = ["--node", node.url.as_str(), "--token", TOKEN_A];
    let file_arg = file.to_str().unwrap();

    let mut args = vec!["put"];
    args.extend(client);
    args.extend(["--model", "tiny-mla", "--chunk-key", &key, file_arg]);
    let o = kvfabric(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let put: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(put["dedup"], "new");
    let id = put["block"].as_str().unwrap().to_owned();

    let out = node.dir.path().join("out.bin");
    let mut args = vec!["get"];
    args.extend(client);
    args.extend([id.as_str(), "--out", out.to_str().unwrap()]);
    let o = kvfabric(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), p);
    assert!(stdout(&o).contains("host"), "{}", stdout(&o));
    let mut args = vec!["get"];
    args.extend(client);
    args.push(id.as_str());
    let o = kvfabric(&args);
    assert_eq!(o.stdout, p, "the payload on stdout");

    let mut args = vec!["lookup"];
    args.extend(client);
    args.push(&key);
    let o = kvfabric(&args);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["results"][0]["block"], id.as_str());

    let mut args = vec!["status"];
    args.extend(client);
    let o = kvfabric(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("n1") && stdout(&o).contains(&node.url),
        "{}",
        stdout(&o)
    );
}

#[test]
fn client_failures_exit_non_zero_with_one_line() {
    let node = common::kvfabric().node(Options::default());
    let absent = "00".repeat(32);
    let o = kvfabric(&["get", "--node", &node.url, "--token", TOKEN_A, &absent]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("404 not_found"), "{err}");
    let o = kvfabric(&["get", "--node", &node.url, &absent]);
    assert!(stderr(&o).contains("401 missing_token"), "{}", stderr(&o));
    let o = kvfabric(&[
        "put",
        "--node",
        &node.url,
        "--token",
        TOKEN_A,
        "--model",
        "gpt-9",
        "/dev/null",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let o = kvfabric(&["status", "--node", "http://127.0.0.1:1"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    let o = kvfabric(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn a_bad_config_exits_non_zero_naming_file_key_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap();
    let node = |text: &str| {
        write(text);
        kvfabric(&["node", "--config", path])
    };
    let base = "[node]\nid = 1\nhttp_listen = \"127.0.0.1:0\"\ndata_dir = \"d\"\n[tiers]\nhost_bytes = \"64 MiB\"\n";

    let o = node(&base.replace("\"64 MiB\"", "\"lots\""));
    assert_eq!(o.status.code(), Some(3));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(path), "names the file: {err}");
    assert!(err.contains("tiers.host_bytes"), "names the key: {err}");
    assert!(err.contains("expected bytes"), "says why: {err}");

    let o = node(&format!("{base}colour = \"blue\"\n"));
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("tiers.colour") && stderr(&o).contains("unknown field"),
        "{}",
        stderr(&o)
    );

    let o = node(&base.replace("\"64 MiB\"", "100"));
    assert!(
        stderr(&o).contains("tiers.host_bytes") && stderr(&o).contains("smallest storable block"),
        "{}",
        stderr(&o)
    );

    let o = node(&format!(
        "{base}[[tenants]]\ntoken = \"0123456789abcdef\"\nnamespace = \"x\"\n"
    ));
    assert!(
        stderr(&o).contains("tenants[0].namespace"),
        "{}",
        stderr(&o)
    );

    let o = kvfabric(&["node", "--config", "/no/such/file.toml"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("/no/such/file.toml"), "{}", stderr(&o));
    assert!(!dir.path().join("d").exists(), "nothing was created");
}

#[test]
fn a_busy_port_exits_non_zero_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n.toml");
    std::fs::write(
        &file,
        format!("[node]\nid = 1\nhttp_listen = \"127.0.0.1:{port}\"\ndata_dir = \"d\"\n[tiers]\nhost_bytes = \"64 MiB\"\n"),
    )
    .unwrap();
    let o = kvfabric(&["node", "--config", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("127.0.0.1:{port}")),
        "{}",
        stderr(&o)
    );
    let _ = TOKEN_A;
}

#[test]
fn certs_writes_a_ca_and_one_certificate_per_node_and_refuses_zero_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = kvfabric(&["certs", "--out", out.to_str().unwrap(), "--nodes", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "ca.pem",
        "ca.key.pem",
        "node1.pem",
        "node1.key.pem",
        "node2.pem",
        "node2.key.pem",
    ] {
        assert!(out.join(f).is_file(), "{f} missing; stdout: {}", stdout(&o));
    }
    assert!(!out.join("node3.pem").exists());
    // One more member later: its certificate from the same CA, the others untouched.
    let ca_before = std::fs::read(out.join("ca.pem")).unwrap();
    let node1_before = std::fs::read(out.join("node1.pem")).unwrap();
    let o = kvfabric(&["certs", "--out", out.to_str().unwrap(), "--add", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("node3.pem").is_file() && out.join("node3.key.pem").is_file());
    assert_eq!(std::fs::read(out.join("ca.pem")).unwrap(), ca_before);
    assert_eq!(std::fs::read(out.join("node1.pem")).unwrap(), node1_before);
    let o = kvfabric(&["certs", "--out", dir.path().to_str().unwrap(), "--add", "3"]);
    assert_eq!(o.status.code(), Some(1), "no CA there");
    assert!(stderr(&o).contains("ca.pem"), "{}", stderr(&o));
    let o = kvfabric(&["certs", "--out", out.to_str().unwrap(), "--nodes", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("kvfabric: error:") && err.contains("node count"),
        "{err}"
    );
}

#[test]
fn a_cluster_config_without_certificates_exits_3_naming_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[node]
id = 1
http_listen = "127.0.0.1:0"
data_dir = "data"
[tiers]
host_bytes = "64 MiB"
[cluster]
certs_dir = "{}"
[[cluster.members]]
id = 1
api = "http://127.0.0.1:7101"
transport = "127.0.0.1:7201"
raft = "127.0.0.1:7301"
"#,
            dir.path().join("no-certs").display()
        ),
    )
    .unwrap();
    let o = kvfabric(&["node", "--config", config.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("cluster.certs_dir") && err.contains("ca.pem"),
        "{err}"
    );
    assert!(err.contains("kvfabric certs --out"), "{err}");
}

#[test]
fn cluster_down_on_a_missing_directory_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let o = kvfabric(&["cluster", "down", "--dir", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no such cluster directory"),
        "{}",
        stderr(&o)
    );
}
