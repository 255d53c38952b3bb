//! The shared cluster harness (`kvfabric_test_support::harness::cluster`) with this crate's
//! binary.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub use kvfabric_test_support::harness::cluster::*;
pub use kvfabric_test_support::harness::{init_tracing, Kvfabric, Reply};

/// The `kvfabric` binary of this crate.
pub fn kvfabric() -> Kvfabric {
    Kvfabric::at(env!("CARGO_BIN_EXE_kvfabric"))
}

/// Token of tenant `a` (namespace `a`) on a [`tenanted`] cluster.
pub const TENANT_A: &str = "cluster-tenant-a-token-0001";
/// Token of tenant `b` (namespace `b`) on a [`tenanted`] cluster.
pub const TENANT_B: &str = "cluster-tenant-b-token-0002";

/// `cluster up` of `nodes` nodes with `extra` arguments and two tenants, `a` ([`TENANT_A`])
/// and `b` ([`TENANT_B`]), given to every node by `--tenancy`.
pub fn tenanted(nodes: u32, extra: &[&str]) -> Cluster {
    let file = tempfile::NamedTempFile::new().expect("tenancy file");
    std::fs::write(
        file.path(),
        format!(
            "[[namespaces]]\nname = \"a\"\n[[namespaces]]\nname = \"b\"\n\
             [[tenants]]\ntoken = \"{TENANT_A}\"\nnamespace = \"a\"\n\
             [[tenants]]\ntoken = \"{TENANT_B}\"\nnamespace = \"b\"\n"
        ),
    )
    .unwrap();
    let path = file.path().display().to_string();
    let mut args = vec!["--tenancy", path.as_str()];
    args.extend_from_slice(extra);
    Cluster::up(&kvfabric(), nodes, &args)
}

/// The `authorization` header of `token`.
pub fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
}
