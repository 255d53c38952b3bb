//! RDMA verbs (`rdma` feature): discovery either lists real devices or fails naming what is
//! missing; the transport never pretends. On a machine without RDMA (CI, this VM) the
//! conformance run is skipped with the printed reason.

#![cfg(feature = "rdma")]

use std::path::Path;
use std::sync::Arc;

use kvfabric_transport::rdma::{discover, RdmaTransport, SYSFS_CLASS_DIR};
use kvfabric_transport::{MemorySource, TransportConfig, TransportError};

fn has_devices() -> bool {
    std::fs::read_dir(SYSFS_CLASS_DIR).is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn discovery_lists_devices_or_names_what_is_missing() {
    match discover() {
        Ok(devices) => {
            assert!(
                has_devices(),
                "devices found without {SYSFS_CLASS_DIR}: {devices:?}"
            );
            for d in &devices {
                assert!(!d.name.is_empty());
                println!("RDMA device: {d}");
            }
        }
        Err(TransportError::FabricUnavailable { fabric, reason }) => {
            assert_eq!(fabric, "RDMA");
            assert!(
                reason.starts_with("no RDMA device: ibv_get_device_list"),
                "{reason}"
            );
            if !Path::new(SYSFS_CLASS_DIR).exists() {
                // This VM and CI: the kernel has no RDMA class at all.
                assert!(reason.contains("returned NULL (errno "), "{reason}");
                assert!(
                    reason
                        .contains("this kernel exposes no RDMA devices (no /sys/class/infiniband)"),
                    "{reason}"
                );
            }
            println!("{reason}");
        }
        Err(other) => panic!("expected devices or FabricUnavailable, found {other:?}"),
    }
}

#[tokio::test]
async fn the_transport_refuses_to_exist_without_a_data_path() {
    let source = Arc::new(MemorySource::new());
    let lo = "127.0.0.1:0".parse().expect("loopback");
    match RdmaTransport::bind(TransportConfig::default(), "node1", lo, source).await {
        Ok(_) => unreachable!("RdmaTransport has no value"),
        Err(TransportError::FabricUnavailable { reason, .. }) => {
            if has_devices() && discover().is_ok() {
                assert!(reason.contains("verbs data path"), "{reason}");
                assert!(reason.contains("not implemented"), "{reason}");
            } else {
                assert!(reason.starts_with("no RDMA device"), "{reason}");
            }
            println!("RDMA conformance skipped: {reason}");
        }
        Err(other) => panic!("expected FabricUnavailable, found {other:?}"),
    }
}

#[tokio::test]
async fn a_bad_config_is_refused_before_discovery() {
    let config = TransportConfig {
        fetches_in_flight_max: 0,
        ..TransportConfig::default()
    };
    let lo = "127.0.0.1:0".parse().expect("loopback");
    let err = RdmaTransport::bind(config, "node1", lo, Arc::new(MemorySource::new()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Config {
                field: "fetches_in_flight_max",
                ..
            }
        ),
        "{err}"
    );
}
