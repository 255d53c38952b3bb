//! Table definitions, record encoding (shared with the WAL) and the blocking-pool bridge of
//! the redb store.

use std::path::Path;
use std::sync::Arc;

use openraft::{AnyError, StorageIOError};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::DirectoryError;
use crate::ids::{NodeId, ShardId};
use crate::type_config::StorageError;

/// Log entries by index: where earlier versions kept the log (now in the WAL; read only to
/// move it there).
pub(super) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// Snapshot and shard id (and, in earlier versions, vote, committed id and purge point).
pub(super) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

pub(super) const KEY_SHARD: &str = "shard";
pub(super) const KEY_SNAPSHOT: &str = "snapshot";
/// Earlier versions' log meta records (moved into the WAL on open).
pub(super) const KEY_VOTE: &str = "vote";
pub(super) const KEY_COMMITTED: &str = "committed";
pub(super) const KEY_LAST_PURGED: &str = "last_purged";

/// Version byte in front of every record; bump when a record's layout changes.
const RECORD_VERSION: u8 = 1;
/// No single record (entry, vote, snapshot) may decode past this many bytes.
const RECORD_BYTES_MAX: usize = 1 << 30;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<RECORD_BYTES_MAX>()
}

/// `version ‖ bincode(value)`.
pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Appends `version ‖ bincode(value)` to `out` (the WAL frames records in place with it).
pub(super) fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), String> {
    out.push(RECORD_VERSION);
    bincode::serde::encode_into_std_write(value, out, bincode_config())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The inverse of [`encode`]; refuses other versions and trailing bytes.
pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (&version, body) = bytes.split_first().ok_or("empty record")?;
    if version != RECORD_VERSION {
        return Err(format!(
            "record version {RECORD_VERSION} expected, found {version}"
        ));
    }
    let (value, used) =
        crate::nesting::decode_from_slice(body, bincode_config()).map_err(|e| e.to_string())?;
    if used != body.len() {
        return Err(format!(
            "record of {} bytes expected, found {} trailing",
            used,
            body.len() - used
        ));
    }
    Ok(value)
}

/// Opens the file, creates the tables, and checks (or stamps) the shard id.
pub(super) fn open_db(path: &Path, shard: ShardId) -> Result<Database, DirectoryError> {
    let db = Database::create(path).map_err(|e| DirectoryError::storage("open", e))?;
    let txn = db
        .begin_write()
        .map_err(|e| DirectoryError::storage("open", e))?;
    {
        txn.open_table(LOG)
            .map_err(|e| DirectoryError::storage("open", e))?;
        let mut meta = txn
            .open_table(META)
            .map_err(|e| DirectoryError::storage("open", e))?;
        let found = meta
            .get(KEY_SHARD)
            .map_err(|e| DirectoryError::storage("open", e))?
            .map(|v| decode::<ShardId>(v.value()));
        match found {
            Some(Ok(found)) if found != shard => {
                return Err(DirectoryError::ShardMismatch {
                    expected: shard,
                    found,
                })
            }
            Some(Ok(_)) => {}
            Some(Err(reason)) => {
                return Err(DirectoryError::Corrupt {
                    what: "shard record",
                    reason,
                })
            }
            None => {
                let rec = encode(&shard).map_err(|e| DirectoryError::storage("open", e))?;
                meta.insert(KEY_SHARD, rec.as_slice())
                    .map_err(|e| DirectoryError::storage("open", e))?;
            }
        }
    }
    txn.commit()
        .map_err(|e| DirectoryError::storage("open", e))?;
    Ok(db)
}

/// Runs blocking redb work on tokio's blocking pool.
pub(super) async fn blocking<T, F>(db: &Arc<Database>, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(&Database) -> Result<T, String> + Send + 'static,
{
    let db = db.clone();
    tokio::task::spawn_blocking(move || f(&db))
        .await
        .map_err(|e| format!("blocking task: {e}"))?
}

/// Reads one meta record.
pub(super) fn read_meta<T: DeserializeOwned>(
    db: &Database,
    key: &str,
) -> Result<Option<T>, String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let meta = txn.open_table(META).map_err(|e| e.to_string())?;
    let v = meta.get(key).map_err(|e| e.to_string())?;
    v.map(|g| decode(g.value())).transpose()
}

/// Writes one meta record in its own durable transaction.
pub(super) fn write_meta<T: Serialize>(db: &Database, key: &str, value: &T) -> Result<(), String> {
    let rec = encode(value)?;
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
        meta.insert(key, rec.as_slice())
            .map_err(|e| e.to_string())?;
    }
    txn.commit().map_err(|e| e.to_string())
}

/// openraft's I/O error from a message.
pub(super) fn io_read(reason: String) -> StorageError {
    StorageIOError::<NodeId>::read(AnyError::error(reason)).into()
}

/// openraft's I/O error from a message.
pub(super) fn io_write(reason: String) -> StorageError {
    StorageIOError::<NodeId>::write(AnyError::error(reason)).into()
}
