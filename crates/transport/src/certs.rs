//! Cluster certificates for mutual TLS: a cluster CA and one certificate per node (rcgen).
//!
//! Owns generating them ([`generate_cluster`], [`ClusterCa`], which also reloads a CA to
//! issue a certificate for a member added later), writing and loading the PEM files, and [`NodeIdentity`], what a transport presents and trusts. Every node's
//! certificate is valid for both sides of TLS (server and client auth), because every node
//! both serves and fetches. Keys are ECDSA P-256. The CA key is written next to the
//! certificates so that `kvfabric certs` can be rerun; keep it off the nodes in production.
//!
//! Files written by [`generate_cluster`] into `out_dir`:
//!
//! | file | holds |
//! |---|---|
//! | `ca.pem`, `ca.key.pem` | the cluster CA's certificate and key |
//! | `nodeN.pem`, `nodeN.key.pem` | node N's certificate (SANs `nodeN`, `localhost`, `127.0.0.1`, `::1`) and key |

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::TransportError;

/// Most nodes [`generate_cluster`] writes certificates for.
pub const CLUSTER_NODES_MAX: u32 = 1024;

/// A cluster CA held in memory: signs node certificates.
pub struct ClusterCa {
    cert: CertificateDer<'static>,
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// What a node presents (its certificate chain and key) and trusts (the cluster CA).
pub struct NodeIdentity {
    name: String,
    ca: CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// Paths of one node's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFiles {
    /// Node name (`nodeN`).
    pub name: String,
    /// Its certificate, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM (mode 0600).
    pub key: PathBuf,
}

/// Paths written by [`generate_cluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFiles {
    /// The CA certificate, PEM.
    pub ca_cert: PathBuf,
    /// The CA private key, PEM (mode 0600).
    pub ca_key: PathBuf,
    /// One entry per node, `node1` first.
    pub nodes: Vec<NodeFiles>,
}

fn rcgen_err(what: &str) -> impl Fn(rcgen::Error) -> TransportError + '_ {
    move |e| TransportError::Certs {
        path: PathBuf::from("<memory>"),
        reason: format!("{what}: {e}"),
    }
}

/// The CA's certificate parameters (one definition for a fresh CA and a reloaded one).
fn ca_params() -> Result<CertificateParams, TransportError> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err("CA parameters"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kvfabric cluster CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

impl ClusterCa {
    /// A fresh CA (new key).
    pub fn generate() -> Result<ClusterCa, TransportError> {
        let key = KeyPair::generate().map_err(rcgen_err("generating the CA key"))?;
        let params = ca_params()?;
        let cert = params
            .self_signed(&key)
            .map_err(rcgen_err("self-signing the CA"))?;
        Ok(ClusterCa {
            cert: cert.der().clone(),
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA [`generate_cluster`] wrote into `dir` (`ca.pem`, `ca.key.pem`), to issue more
    /// certificates under it (a member added to a running cluster).
    pub fn load(dir: &Path) -> Result<ClusterCa, TransportError> {
        let cert_path = dir.join("ca.pem");
        let key_path = dir.join("ca.key.pem");
        let cert_pem = fs::read_to_string(&cert_path).map_err(|e| certs_err(&cert_path, e))?;
        let key_pem = fs::read_to_string(&key_path).map_err(|e| certs_err(&key_path, e))?;
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| certs_err(&cert_path, e))?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| certs_err(&key_path, e))?;
        Ok(ClusterCa {
            cert,
            cert_pem,
            issuer: Issuer::new(ca_params()?, key),
        })
    }

    /// Issues `name`'s certificate and key into `dir` (`name.pem`, `name.key.pem`, the key
    /// mode 0600), replacing files of those names.
    pub fn issue_into(&self, dir: &Path, name: &str) -> Result<NodeFiles, TransportError> {
        let files = NodeFiles {
            name: name.to_owned(),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key.pem")),
        };
        let (cert, key) = self.issue_pem(name)?;
        write_file(&files.cert, &cert, false)?;
        write_file(&files.key, &key, true)?;
        Ok(files)
    }

    /// The CA certificate (DER).
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The CA certificate and key as PEM.
    pub fn to_pem(&self) -> (String, String) {
        (self.cert_pem.clone(), self.issuer.key().serialize_pem())
    }

    /// Issues a certificate for `name` (SANs: `name`, `localhost`, `127.0.0.1`, `::1`).
    pub fn issue(&self, name: &str) -> Result<NodeIdentity, TransportError> {
        let (cert_pem, key_pem) = self.issue_pem(name)?;
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| certs_err(Path::new("<memory>"), e))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| certs_err(Path::new("<memory>"), e))?;
        Ok(NodeIdentity::from_parts(
            name,
            self.cert.clone(),
            vec![cert],
            key,
        ))
    }

    fn issue_pem(&self, name: &str) -> Result<(String, String), TransportError> {
        let key = KeyPair::generate().map_err(rcgen_err("generating a node key"))?;
        let sans = vec![
            name.to_string(),
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
        ];
        let mut params = CertificateParams::new(sans).map_err(rcgen_err("node parameters"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_err("signing a node"))?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn certs_err(path: &Path, e: impl std::fmt::Display) -> TransportError {
    TransportError::Certs {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), TransportError> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = opts.open(path).map_err(|e| certs_err(path, e))?;
    f.write_all(contents.as_bytes())
        .map_err(|e| certs_err(path, e))?;
    f.sync_all().map_err(|e| certs_err(path, e))
}

/// Writes a fresh cluster CA and certificates for `node1` … `node{nodes}` into `out_dir`
/// (created if missing; existing files of the same names are replaced).
pub fn generate_cluster(out_dir: &Path, nodes: u32) -> Result<ClusterFiles, TransportError> {
    if nodes == 0 || nodes > CLUSTER_NODES_MAX {
        return Err(certs_err(
            out_dir,
            format!("node count: expected 1..={CLUSTER_NODES_MAX}, found {nodes}"),
        ));
    }
    fs::create_dir_all(out_dir).map_err(|e| certs_err(out_dir, e))?;
    let ca = ClusterCa::generate()?;
    let (ca_pem, ca_key_pem) = ca.to_pem();
    let files = ClusterFiles {
        ca_cert: out_dir.join("ca.pem"),
        ca_key: out_dir.join("ca.key.pem"),
        nodes: (1..=nodes)
            .map(|n| NodeFiles {
                name: format!("node{n}"),
                cert: out_dir.join(format!("node{n}.pem")),
                key: out_dir.join(format!("node{n}.key.pem")),
            })
            .collect(),
    };
    write_file(&files.ca_cert, &ca_pem, false)?;
    write_file(&files.ca_key, &ca_key_pem, true)?;
    for node in &files.nodes {
        let (cert, key) = ca.issue_pem(&node.name)?;
        write_file(&node.cert, &cert, false)?;
        write_file(&node.key, &key, true)?;
    }
    Ok(files)
}

impl NodeIdentity {
    /// An identity from parts: `name`, the CA it trusts, the chain it presents, its key.
    pub fn from_parts(
        name: impl Into<String>,
        ca: CertificateDer<'static>,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> NodeIdentity {
        NodeIdentity {
            name: name.into(),
            ca,
            chain,
            key,
        }
    }

    /// Loads `name`'s identity from PEM files: the CA certificate, its certificate (chain), key.
    pub fn load(
        name: impl Into<String>,
        ca_cert: &Path,
        cert: &Path,
        key: &Path,
    ) -> Result<NodeIdentity, TransportError> {
        let ca = CertificateDer::from_pem_file(ca_cert).map_err(|e| certs_err(ca_cert, e))?;
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|e| certs_err(cert, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| certs_err(cert, e))?;
        if chain.is_empty() {
            return Err(certs_err(
                cert,
                "expected at least one certificate, found none",
            ));
        }
        let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| certs_err(key, e))?;
        Ok(NodeIdentity::from_parts(name, ca, chain, key_der))
    }

    /// Loads node `name` from a directory written by [`generate_cluster`].
    pub fn load_from_dir(dir: &Path, name: &str) -> Result<NodeIdentity, TransportError> {
        NodeIdentity::load(
            name,
            &dir.join("ca.pem"),
            &dir.join(format!("{name}.pem")),
            &dir.join(format!("{name}.key.pem")),
        )
    }

    /// The node name the certificate was issued to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CA this identity trusts.
    pub fn ca_cert(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    /// The chain this identity presents, leaf first.
    pub fn cert_chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// A copy of the private key.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("name", &self.name)
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_files_load_back_with_private_keys_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = generate_cluster(dir.path(), 3).expect("generate");
        assert_eq!(files.nodes.len(), 3);
        assert_eq!(files.nodes[2].name, "node3");
        for node in &files.nodes {
            let id = NodeIdentity::load_from_dir(dir.path(), &node.name).expect("load");
            assert_eq!(id.name(), node.name);
            assert_eq!(id.cert_chain().len(), 1);
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = fs::metadata(&node.key).expect("stat").permissions().mode();
                assert_eq!(
                    mode & 0o077,
                    0,
                    "{} is readable by others",
                    node.key.display()
                );
            }
        }
        let ca = CertificateDer::from_pem_file(&files.ca_cert).expect("ca");
        assert_eq!(
            NodeIdentity::load_from_dir(dir.path(), "node1")
                .expect("load")
                .ca_cert(),
            &ca
        );
    }

    #[test]
    fn zero_nodes_and_missing_files_are_refused_with_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            generate_cluster(dir.path(), 0),
            Err(TransportError::Certs { .. })
        ));
        match NodeIdentity::load_from_dir(dir.path(), "node1") {
            Err(TransportError::Certs { path, .. }) => assert!(path.ends_with("ca.pem")),
            other => panic!("expected a certs error, found {other:?}"),
        }
    }
}
