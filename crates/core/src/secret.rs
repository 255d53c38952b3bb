//! The cluster's namespace secret file, `namespace-secret.toml`: what every member derives its
//! namespace keys from ([`kvfabric_store::NamespaceKey::from_secret`]), generated beside the
//! certificates by `kvfabric certs` and `kvfabric cluster up`, and rotated by
//! `kvfabric secret stage | promote | retire`.
//!
//! ```toml
//! current = "64 hex digits"      # puts derive their namespace keys from it
//! next = "64 hex digits"         # optional, read only: staged, current after `promote`
//! previous = ["64 hex digits"]   # read only: blocks put under these stay readable
//! ```
//!
//! A block is put under `current`; a read, a lookup or a delete tries every secret of the
//! file (`current`, then `next`, then `previous` in order). Rotation in three rolling
//! restarts, none of which makes a block unreadable on any node while it runs:
//! 1. `stage` writes a new secret as `next`; every node learns to read under it;
//! 2. `promote` makes `next` current and the old current the first of `previous`: puts now
//!    use the new secret, blocks put under the old one stay readable (same ids, same chunk
//!    keys, found through either secret);
//! 3. `retire` (once the old blocks no longer matter) drops `previous`: a node restarted
//!    with that file no longer reads the old blocks; its store finds them on disk under a
//!    namespace key it does not have and releases them (counted as `orphaned` at start,
//!    evicted as space is needed, never served).
//!
//! Files are written whole to a temporary file and renamed over (mode 0600); a new file never
//! replaces an existing one ([`ensure`]), so members starting together share one secret.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use kvfabric_store::NamespaceSecret;
use serde::{Deserialize, Serialize};

use crate::error::FabricError;

/// The file name beside the certificates (and, standalone, in the data directory).
pub const SECRET_FILE: &str = "namespace-secret.toml";
/// Most `previous` secrets a file keeps (retire before promoting again).
pub const PREVIOUS_MAX: usize = 4;
/// Largest secret file read, in bytes.
const SECRET_FILE_BYTES_MAX: u64 = 16 << 10;

/// The secrets of one file.
#[derive(Clone, PartialEq, Eq)]
pub struct Secrets {
    /// What puts use.
    pub current: NamespaceSecret,
    /// Staged for the next `promote`; read only.
    pub next: Option<NamespaceSecret>,
    /// Earlier secrets, newest first; read only.
    pub previous: Vec<NamespaceSecret>,
}

impl std::fmt::Debug for Secrets {
    /// Ids only, never a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("current", &self.current.id())
            .field("next", &self.next.map(|s| s.id()))
            .field(
                "previous",
                &self.previous.iter().map(|s| s.id()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecrets {
    current: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    previous: Vec<String>,
}

/// A rotation step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// A new secret as `next`.
    Stage,
    /// `next` becomes `current`; `current` the first of `previous`.
    Promote,
    /// `previous` dropped.
    Retire,
}

fn file_err(path: &Path, reason: impl Into<String>) -> FabricError {
    FabricError::SecretFile {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn random() -> Result<NamespaceSecret, FabricError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)
        .map_err(|e| FabricError::SecretRotation(format!("the OS random source failed: {e}")))?;
    Ok(NamespaceSecret(b))
}

impl Secrets {
    /// A fresh secret (from the OS random source) with nothing staged or kept.
    pub fn generate() -> Result<Secrets, FabricError> {
        Ok(Secrets {
            current: random()?,
            next: None,
            previous: Vec::new(),
        })
    }

    /// Every secret blocks may have been put under: `current`, `next`, then `previous`.
    pub fn readable(&self) -> Vec<NamespaceSecret> {
        let mut out = vec![self.current];
        out.extend(self.next);
        out.extend(self.previous.iter().copied());
        out
    }

    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Secrets, FabricError> {
        let len = std::fs::metadata(path)
            .map_err(|e| file_err(path, format!("cannot read: {e}")))?
            .len();
        if len > SECRET_FILE_BYTES_MAX {
            return Err(file_err(
                path,
                format!("expected at most {SECRET_FILE_BYTES_MAX} bytes, found {len}"),
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| file_err(path, format!("cannot read: {e}")))?;
        Secrets::parse(&text).map_err(|reason| file_err(path, reason))
    }

    /// Parses the file's text; the reason names the key.
    pub fn parse(text: &str) -> Result<Secrets, String> {
        let raw: RawSecrets = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        let one = |key: &str, hex: &str| {
            kvfabric_store::id::parse_hex32(hex)
                .map(NamespaceSecret)
                .map_err(|e| format!("{key}: {e}"))
        };
        if raw.previous.len() > PREVIOUS_MAX {
            return Err(format!(
                "previous: expected at most {PREVIOUS_MAX} secrets, found {}",
                raw.previous.len()
            ));
        }
        let s = Secrets {
            current: one("current", &raw.current)?,
            next: raw.next.as_deref().map(|n| one("next", n)).transpose()?,
            previous: raw
                .previous
                .iter()
                .map(|p| one("previous", p))
                .collect::<Result<_, _>>()?,
        };
        let all = s.readable();
        if (1..all.len()).any(|i| all[..i].contains(&all[i])) {
            return Err("expected every secret once, found one twice".into());
        }
        Ok(s)
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        let hex = |s: &NamespaceSecret| kvfabric_store::NamespaceKey(s.0).to_hex();
        let raw = RawSecrets {
            current: hex(&self.current),
            next: self.next.as_ref().map(hex),
            previous: self.previous.iter().map(hex).collect(),
        };
        format!(
            "# kvfabric namespace secret: every namespace key derives from it. Keep it as private\n\
             # as the nodes' keys; every member loads the same file. Rotate with\n\
             # `kvfabric secret stage|promote|retire` (docs/API.md, \"Namespace secret\").\n{}",
            toml::to_string(&raw).expect("secrets always serialize")
        )
    }

    /// Applies one rotation step; refuses a step that does not apply (nothing staged, already
    /// staged, too many previous secrets, nothing to retire) with the reason.
    pub fn rotate(&mut self, step: Rotation) -> Result<(), FabricError> {
        let refuse = |reason: &str| FabricError::SecretRotation(reason.to_owned());
        match step {
            Rotation::Stage => {
                if self.next.is_some() {
                    return Err(refuse(
                        "a secret is already staged (next): promote it first",
                    ));
                }
                self.next = Some(random()?);
            }
            Rotation::Promote => {
                let Some(next) = self.next.take() else {
                    return Err(refuse(
                        "nothing to promote: stage a secret and restart every node first",
                    ));
                };
                if self.previous.len() >= PREVIOUS_MAX {
                    self.next = Some(next);
                    return Err(refuse(&format!(
                        "{PREVIOUS_MAX} previous secrets are kept already: retire them first"
                    )));
                }
                self.previous.insert(0, self.current);
                self.current = next;
            }
            Rotation::Retire => {
                if self.previous.is_empty() {
                    return Err(refuse("no previous secret to retire"));
                }
                self.previous.clear();
            }
        }
        Ok(())
    }

    /// Writes the file: a temporary file beside it (mode 0600), synced, renamed over `path`.
    pub fn write(&self, path: &Path) -> Result<(), FabricError> {
        let tmp = temp_path(path);
        write_new(&tmp, self.to_toml().as_bytes())?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            file_err(path, format!("cannot replace: {e}"))
        })
    }
}

/// A temporary name beside `path`, unique to this process and call.
fn temp_path(path: &Path) -> std::path::PathBuf {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{seq}.tmp", std::process::id()))
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<(), FabricError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| file_err(path, format!("cannot create: {e}")))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| file_err(path, format!("cannot write: {e}")))
}

/// The secrets at `path`, generating a fresh file there if there is none (its directory
/// created). Never replaces a file: of callers racing to create it, one wins and every one
/// gets its secret. Returns whether this call created it.
pub fn ensure(path: &Path) -> Result<(Secrets, bool), FabricError> {
    if path.exists() {
        return Ok((Secrets::load(path)?, false));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| file_err(dir, format!("cannot create: {e}")))?;
    }
    let fresh = Secrets::generate()?;
    let tmp = temp_path(path);
    write_new(&tmp, fresh.to_toml().as_bytes())?;
    // A hard link never replaces an existing file: the first creator wins.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((fresh, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok((Secrets::load(path)?, false))
        }
        Err(e) => Err(file_err(path, format!("cannot create: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_and_bad_ones_are_refused_naming_the_key() {
        let mut s = Secrets::generate().unwrap();
        s.rotate(Rotation::Stage).unwrap();
        let back = Secrets::parse(&s.to_toml()).unwrap();
        assert_eq!(back, s);
        assert!(!format!("{s:?}").contains(&kvfabric_store::NamespaceKey(s.current.0).to_hex()));
        for (text, why) in [
            ("current = \"00\"\n", "current: expected 64 hex digits"),
            ("", "missing field `current`"),
            (
                &format!("current = \"{}\"\nother = 1\n", "a".repeat(64)),
                "unknown field",
            ),
            (
                &format!("current = \"{0}\"\nprevious = [\"{0}\"]\n", "a".repeat(64)),
                "found one twice",
            ),
            (
                &format!(
                    "current = \"{}\"\nprevious = [{}]\n",
                    "a".repeat(64),
                    (0..5)
                        .map(|i| format!("\"{}\"", i.to_string().repeat(64)))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                "at most 4",
            ),
        ] {
            let e = Secrets::parse(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn rotation_stages_promotes_and_retires_keeping_every_block_readable_until_retired() {
        let mut s = Secrets::generate().unwrap();
        let first = s.current;
        assert!(s.rotate(Rotation::Promote).is_err(), "nothing staged");
        assert!(s.rotate(Rotation::Retire).is_err(), "nothing to retire");
        s.rotate(Rotation::Stage).unwrap();
        let staged = s.next.unwrap();
        assert!(s.rotate(Rotation::Stage).is_err(), "one staged at a time");
        assert_eq!(s.current, first, "staging changes no put");
        assert_eq!(s.readable(), vec![first, staged]);
        s.rotate(Rotation::Promote).unwrap();
        assert_eq!(s.current, staged);
        assert_eq!(
            s.readable(),
            vec![staged, first],
            "the old blocks stay readable"
        );
        s.rotate(Rotation::Retire).unwrap();
        assert_eq!(s.readable(), vec![staged]);
        for _ in 0..PREVIOUS_MAX {
            s.rotate(Rotation::Stage).unwrap();
            s.rotate(Rotation::Promote).unwrap();
        }
        s.rotate(Rotation::Stage).unwrap();
        let before = s.clone();
        let e = s.rotate(Rotation::Promote).unwrap_err();
        assert!(e.to_string().contains("retire them first"), "{e}");
        assert_eq!(s, before, "a refused step changes nothing");
    }

    #[test]
    fn ensure_creates_once_and_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("certs").join(SECRET_FILE);
        let results: Vec<(Secrets, bool)> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4)
                .map(|_| sc.spawn(|| ensure(&path).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|(_, c)| *c).count(), 1, "one creator");
        assert!(
            results.iter().all(|(s, _)| *s == results[0].0),
            "one secret"
        );
        let (again, created) = ensure(&path).unwrap();
        assert!(!created);
        assert_eq!(again, results[0].0);
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let mut rotated = again.clone();
        rotated.rotate(Rotation::Stage).unwrap();
        rotated.write(&path).unwrap();
        assert_eq!(Secrets::load(&path).unwrap(), rotated);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }
}
