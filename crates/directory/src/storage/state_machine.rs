//! The shard state machine and its snapshots: openraft's `RaftStateMachine`.
//!
//! The state lives in memory behind a lock that local reads share ([`ShardView`]); snapshots are
//! persisted in redb (see the module above for the recovery story).

use std::io::Cursor;
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use redb::Database;
use serde::{Deserialize, Serialize};

use super::records::{blocking, io_read, io_write, read_meta, write_meta, KEY_SNAPSHOT};
use super::snapshot::{decode_snapshot, encode_snapshot};
use super::snapshot_trigger::SnapshotTrigger;
use crate::command::CommandReply;
use crate::error::DirectoryError;
use crate::ids::ShardId;
use crate::shard::ShardState;
use crate::type_config::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

/// The snapshot as persisted: openraft's metadata and the bytes in snapshot format.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Applied {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    state: ShardState,
    /// Planted bug (chaos harness only): this replica records something no other applies.
    #[cfg(feature = "planted-bug-diverging-replica")]
    diverging: bool,
}

/// A shared, read-only view of a member's applied shard state: what local reads use.
#[derive(Debug, Clone)]
pub struct ShardView {
    inner: Arc<RwLock<Applied>>,
}

impl ShardView {
    /// Runs `f` on the state as applied so far. Never held across an await.
    pub fn read<R>(&self, f: impl FnOnce(&ShardState) -> R) -> R {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        f(&guard.state)
    }

    /// The last log id applied to this state.
    pub fn last_applied(&self) -> Option<LogId> {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        guard.last_applied
    }

    /// Plants the divergence the chaos harness's digest comparison must catch: after each
    /// entry it applies from now on, this replica records a reply of a client no other member
    /// knows (nothing reads it; only the state's bytes differ).
    #[cfg(feature = "planted-bug-diverging-replica")]
    pub fn plant_divergence(&self) {
        self.inner
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .diverging = true;
    }

    /// The last log id applied and a blake3 digest of the state as of it (its snapshot bytes,
    /// written in key order): members that applied the same log hold equal digests at equal
    /// ids, so two that differ at one id have diverged. The state is cloned under the lock and
    /// encoded outside it.
    pub fn digest(&self) -> Result<StateDigest, DirectoryError> {
        let (applied, state) = {
            let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
            (g.last_applied, g.state.clone())
        };
        let bytes = encode_snapshot(&state)?;
        Ok(StateDigest {
            applied,
            digest: blake3::hash(&bytes),
        })
    }
}

/// A member's applied state in 32 bytes ([`ShardView::digest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    /// The last log id applied.
    pub applied: Option<LogId>,
    /// blake3 of the state's snapshot bytes.
    pub digest: blake3::Hash,
}

/// The state machine of one member.
pub struct StateMachineStore {
    db: Arc<Database>,
    shard: ShardId,
    view: ShardView,
    snapshot_seq: u64,
    trigger: Arc<SnapshotTrigger>,
}

impl std::fmt::Debug for StateMachineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachineStore")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl StateMachineStore {
    /// Loads the last persisted snapshot (if any) as the starting state.
    pub(super) async fn load(
        db: Arc<Database>,
        shard: ShardId,
        trigger: Arc<SnapshotTrigger>,
    ) -> Result<Self, DirectoryError> {
        let stored: Option<StoredSnapshot> = blocking(&db, |db| read_meta(db, KEY_SNAPSHOT))
            .await
            .map_err(|e| DirectoryError::storage("load snapshot", e))?;
        let applied = match stored {
            None => Applied {
                last_applied: None,
                membership: StoredMembership::default(),
                state: ShardState::new(shard),
                #[cfg(feature = "planted-bug-diverging-replica")]
                diverging: false,
            },
            Some(s) => Applied {
                last_applied: s.meta.last_log_id,
                membership: s.meta.last_membership.clone(),
                state: decode_snapshot(&s.data, shard)?,
                #[cfg(feature = "planted-bug-diverging-replica")]
                diverging: false,
            },
        };
        Ok(StateMachineStore {
            db,
            shard,
            view: ShardView {
                inner: Arc::new(RwLock::new(applied)),
            },
            snapshot_seq: 0,
            trigger,
        })
    }

    /// The view that local reads use.
    pub fn view(&self) -> ShardView {
        self.view.clone()
    }
}

/// Builds a snapshot from a copy of the state taken under the read lock.
pub struct SnapshotBuilder {
    db: Arc<Database>,
    view: ShardView,
    seq: u64,
    trigger: Arc<SnapshotTrigger>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        // Copy under the lock, encode outside it, so applies are blocked only for the copy.
        let (last_applied, membership, state) = {
            let g = self.view.inner.read().unwrap_or_else(|p| p.into_inner());
            // Applies wait for this lock, so nothing lands between the copy and the reset.
            self.trigger.reset();
            (g.last_applied, g.membership.clone(), g.state.clone())
        };
        let data = encode_snapshot(&state).map_err(|e| io_write(e.to_string()))?;
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, self.seq),
            None => format!("--{}", self.seq),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        blocking(&self.db, move |db| write_meta(db, KEY_SNAPSHOT, &stored))
            .await
            .map_err(|e| {
                StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::error(e))
            })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let g = self.view.inner.read().unwrap_or_else(|p| p.into_inner());
        Ok((g.last_applied, g.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandReply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut g = self.view.inner.write().unwrap_or_else(|p| p.into_inner());
        let mut replies = Vec::new();
        let mut records = 0;
        for entry in entries {
            g.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => CommandReply::Empty,
                EntryPayload::Normal(request) => {
                    records += request.command.record_count();
                    g.state.apply_request(&request, entry.log_id.index)
                }
                EntryPayload::Membership(m) => {
                    g.membership = StoredMembership::new(Some(entry.log_id), m);
                    CommandReply::Empty
                }
            };
            replies.push(reply);
            #[cfg(feature = "planted-bug-diverging-replica")]
            if g.diverging {
                g.state.plant_phantom_reply(entry.log_id.index);
            }
        }
        let state_records = (g.state.block_count() + g.state.chunk_count()) as u64;
        self.trigger.applied(records, state_records);
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        self.snapshot_seq += 1;
        SnapshotBuilder {
            db: self.db.clone(),
            view: self.view.clone(),
            seq: self.snapshot_seq,
            trigger: self.trigger.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let state = decode_snapshot(&data, self.shard).map_err(|e| {
            StorageIOError::read_snapshot(Some(meta.signature()), openraft::AnyError::error(e))
        })?;
        // Persist first: if that fails the member keeps its old state and snapshot.
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        blocking(&self.db, move |db| write_meta(db, KEY_SNAPSHOT, &stored))
            .await
            .map_err(io_write)?;
        let mut g = self.view.inner.write().unwrap_or_else(|p| p.into_inner());
        g.state = state;
        self.trigger.reset();
        g.last_applied = meta.last_log_id;
        g.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let stored: Option<StoredSnapshot> = blocking(&self.db, |db| read_meta(db, KEY_SNAPSHOT))
            .await
            .map_err(io_read)?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
