//! Namespace keys derive from the namespace secret, never from names alone: a standalone node
//! writes its secret into its data directory on the first start and keeps it; a node told to
//! read a secret file that does not exist refuses to start, naming the file and the command
//! that writes one; `GET /v1/namespaces` hands a caller the keys of what it may read and
//! nothing else.

mod common;

use common::{payload, tiny, Options, TOKEN_A, TOKEN_B};
use kvfabric_core::secret::{Secrets, SECRET_FILE};
use kvfabric_store::{Blake3Ids, BlockHeader, IdHasher, ModelGeometry, NamespaceKey};

/// The id `payload` of `g` gets under `key`.
fn id_under(key: &NamespaceKey, g: &ModelGeometry, payload: &[u8]) -> String {
    let header = BlockHeader::for_geometry(g).encode();
    Blake3Ids.id(key, &[&header, payload]).to_hex()
}

#[test]
fn a_standalone_node_keys_ids_by_the_secret_it_wrote_and_keeps_it() {
    let g = tiny();
    let mut node = common::kvfabric().node(Options::default());
    let file = node.dir.path().join("data").join(SECRET_FILE);
    let secrets = Secrets::load(&file).expect("written on the first start");
    let mode = std::fs::metadata(&file).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let data = payload(&g, 1);
    let id = node.put(Some(TOKEN_A), &g, &data, &[]).block();
    let key_a = NamespaceKey::from_secret(&secrets.current, "a");
    assert_eq!(id, id_under(&key_a, &g, &data), "keyed by the secret");
    assert_ne!(
        id,
        id_under(&NamespaceKey::derive("a"), &g, &data),
        "never by the name alone"
    );

    // Each caller learns the keys of what it may read: its own namespace and the shared one.
    let ns = node.get(Some(TOKEN_A), "/v1/namespaces", &[]).json();
    let names: Vec<(&str, &str)> = ns["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["access"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("a", "write"), ("docs", "read")]);
    assert_eq!(ns["namespaces"][0]["keys"][0], key_a.to_hex());
    let b = node.get(Some(TOKEN_B), "/v1/namespaces", &[]).text();
    assert!(!b.contains(&key_a.to_hex()), "b never sees a's key: {b}");
    assert!(b.contains(&NamespaceKey::from_secret(&secrets.current, "b").to_hex()));
    node.get(
        Some(TOKEN_A),
        "/v1/namespaces",
        &[("kvfabric-namespace", "b")],
    )
    .assert_error(403, "namespace_forbidden");
    node.get(None, "/v1/namespaces", &[])
        .assert_error(401, "missing_token");

    // The secret survives a restart: the same bytes get the same id again.
    node.restart();
    assert_eq!(
        Secrets::load(&file).unwrap(),
        secrets,
        "kept, not regenerated"
    );
    assert_eq!(node.put(Some(TOKEN_A), &g, &data, &[]).block(), id);
}

#[test]
fn a_node_whose_secret_file_is_missing_refuses_to_start_and_says_how_to_write_one() {
    let node = common::kvfabric().node(Options::default());
    let text = std::fs::read_to_string(node.config_path()).unwrap();
    let mut config: toml::Table = text.parse().unwrap();
    let missing = node.dir.path().join("elsewhere").join(SECRET_FILE);
    config["node"].as_table_mut().unwrap().insert(
        "namespace_secret".into(),
        toml::Value::String(missing.display().to_string()),
    );
    config["node"]
        .as_table_mut()
        .unwrap()
        .insert("data_dir".into(), "data2".into());
    let path = node.dir.path().join("missing-secret.toml");
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    let out = common::kvfabric()
        .command()
        .arg("node")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&missing.display().to_string()) && stderr.contains("kvfabric certs"),
        "{stderr}"
    );
    assert!(!missing.exists(), "an explicit path is never created");
}

#[test]
fn kvfabric_certs_writes_a_secret_once_and_secret_rotates_it() {
    let dir = tempfile::tempdir().unwrap();
    let certs = |dir: &std::path::Path| {
        let out = common::kvfabric()
            .command()
            .args(["certs", "--nodes", "2", "--out"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = certs(dir.path());
    let file = dir.path().join(SECRET_FILE);
    let s = Secrets::load(&file).unwrap();
    assert!(
        first.contains(&format!("id {}, new", s.current.id())),
        "{first}"
    );
    let again = certs(dir.path());
    assert!(again.contains("kept"), "{again}");
    assert_eq!(
        Secrets::load(&file).unwrap(),
        s,
        "certificates again, the secret kept"
    );

    let step = |step: &str| {
        common::kvfabric()
            .command()
            .args(["secret", step, "--file"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let out = step("promote");
    assert_eq!(out.status.code(), Some(1), "nothing staged");
    assert!(String::from_utf8_lossy(&out.stderr).contains("stage a secret"));
    assert!(step("stage").status.success());
    let staged = Secrets::load(&file).unwrap();
    assert_eq!(staged.current, s.current);
    let next = staged.next.expect("staged");
    assert!(step("promote").status.success());
    let promoted = Secrets::load(&file).unwrap();
    assert_eq!(
        (promoted.current, promoted.previous.clone()),
        (next, vec![s.current])
    );
    let shown = step("show");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!("current  {}", next.id()))
            && shown.contains(&format!("previous {}", s.current.id())),
        "{shown}"
    );
    let hex = NamespaceKey(s.current.0).to_hex();
    assert!(!shown.contains(&hex), "ids only, never a secret");
    assert!(step("retire").status.success());
    assert!(Secrets::load(&file).unwrap().previous.is_empty());
}
