//! Mutual TLS: only certificates the cluster CA signed get through, on either side.

mod common;

use std::sync::Arc;

use common::{loopback, QuicFactory};
use kvfabric_store::NamespaceKey;
use kvfabric_transport::conformance::sources::test_block;
use kvfabric_transport::conformance::{eventually, suite_config, TransportFactory};
use kvfabric_transport::{
    generate_cluster, ClusterCa, MemorySource, NodeIdentity, PeerAddr, QuicTransport, Transport,
    TransportError,
};

fn ns() -> NamespaceKey {
    NamespaceKey::derive("tls")
}

/// An identity that trusts `trusts` but presents a certificate `signer` issued.
fn mixed(name: &str, trusts: &ClusterCa, signer: &ClusterCa) -> NodeIdentity {
    let issued = signer.issue(name).expect("issue");
    NodeIdentity::from_parts(
        name,
        trusts.cert_der().clone(),
        issued.cert_chain().to_vec(),
        issued.key(),
    )
}

fn served_source() -> (Arc<MemorySource>, kvfabric_store::VerifiedBlock) {
    let block = test_block(ns(), 50_000, 7);
    let source = Arc::new(MemorySource::new());
    source.insert(block.clone());
    (source, block)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_refused() {
    let cluster = QuicFactory::new();
    let (source, block) = served_source();
    let server = cluster.build(suite_config(), source).await.expect("server");
    let foreign = ClusterCa::generate().expect("foreign CA");
    let intruder = mixed("node9", &cluster.ca, &foreign);
    let client = QuicTransport::bind(
        suite_config(),
        &intruder,
        loopback(),
        Arc::new(MemorySource::new()),
    )
    .await
    .expect("client");
    let err = client
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .unwrap_err();
    assert!(
        matches!(err, TransportError::Handshake { .. }),
        "expected a handshake refusal, found {err}"
    );
    eventually("the server counts the refused handshake", || {
        server.counters().handshakes_refused == 1
    })
    .await;
    assert_eq!(server.counters().blocks_served, 0);
    assert_eq!(client.counters().handshakes_refused, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused() {
    let cluster = QuicFactory::new();
    let foreign = ClusterCa::generate().expect("foreign CA");
    let impostor = mixed("node1", &cluster.ca, &foreign);
    let (source, block) = served_source();
    let server = QuicTransport::bind(suite_config(), &impostor, loopback(), source)
        .await
        .expect("server");
    let client = cluster
        .build(suite_config(), Arc::new(MemorySource::new()))
        .await
        .expect("client");
    let err = client
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .unwrap_err();
    assert!(
        matches!(err, TransportError::Handshake { .. }),
        "expected a handshake refusal, found {err}"
    );
    assert_eq!(client.counters().handshakes_refused, 1);
    assert_eq!(server.counters().blocks_served, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_for_another_name_is_refused() {
    let cluster = QuicFactory::new();
    let (source, block) = served_source();
    let server = cluster.build(suite_config(), source).await.expect("server");
    let client = cluster
        .build(suite_config(), Arc::new(MemorySource::new()))
        .await
        .expect("client");
    let wrong = PeerAddr::new("node77", server.local_addr());
    let err = client.fetch(&wrong, ns(), block.id()).await.unwrap_err();
    assert!(
        matches!(err, TransportError::Handshake { .. }),
        "expected a handshake refusal, found {err}"
    );
    // The right name on the same address works.
    let got = client
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("fetch");
    assert_eq!(got.bytes(), block.bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_loaded_from_generated_files_talk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = generate_cluster(dir.path(), 2).expect("generate");
    let node1 = NodeIdentity::load(
        "node1",
        &files.ca_cert,
        &files.nodes[0].cert,
        &files.nodes[0].key,
    )
    .expect("node1");
    let node2 = NodeIdentity::load_from_dir(dir.path(), "node2").expect("node2");
    let (source, block) = served_source();
    let server = QuicTransport::bind(suite_config(), &node1, loopback(), source)
        .await
        .expect("server");
    let client = QuicTransport::bind(
        suite_config(),
        &node2,
        loopback(),
        Arc::new(MemorySource::new()),
    )
    .await
    .expect("client");
    let got = client
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("fetch");
    assert_eq!(got.id(), block.id());
    assert_eq!(server.local_peer().name, "node1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_issued_later_by_the_reloaded_ca_talks_with_the_first_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    generate_cluster(dir.path(), 2).expect("generate");
    // A member added to the running cluster: its certificate comes from the same CA, loaded
    // back from the files.
    let files = ClusterCa::load(dir.path())
        .expect("reload the CA")
        .issue_into(dir.path(), "node3")
        .expect("issue node3");
    assert!(files.cert.ends_with("node3.pem"), "{files:?}");
    let node1 = NodeIdentity::load_from_dir(dir.path(), "node1").expect("node1");
    let node3 = NodeIdentity::load_from_dir(dir.path(), "node3").expect("node3");
    assert_eq!(node3.ca_cert(), node1.ca_cert(), "the same CA");
    let (source, block) = served_source();
    let server = QuicTransport::bind(suite_config(), &node1, loopback(), source)
        .await
        .expect("server");
    let (source3, block3) = {
        let b = test_block(ns(), 40_000, 9);
        let s = Arc::new(MemorySource::new());
        s.insert(b.clone());
        (s, b)
    };
    let client = QuicTransport::bind(suite_config(), &node3, loopback(), source3)
        .await
        .expect("client");
    let got = client
        .fetch(&server.local_peer(), ns(), block.id())
        .await
        .expect("node3 fetches from node1");
    assert_eq!(got.bytes(), block.bytes());
    let back = server
        .fetch(&client.local_peer(), ns(), block3.id())
        .await
        .expect("node1 fetches from node3");
    assert_eq!(back.bytes(), block3.bytes());
    assert!(
        ClusterCa::load(&dir.path().join("nowhere")).is_err(),
        "a missing CA is an error"
    );
}
