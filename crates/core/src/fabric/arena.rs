//! The per-request arenas of hybrid (DeepSeek-V4) models: [`Fabric::arena_create`],
//! [`Fabric::arena_append_token`], [`Fabric::arena_append_row`], [`Fabric::arena_window`],
//! [`Fabric::arena_drain`], [`Fabric::arena_status`] and [`Fabric::arena_free`] over the
//! store's bounded [`Arenas`] table (its sizing rule: `kvfabric_store::arena`).
//!
//! Tenancy is that of blocks: an arena belongs to the namespace it was created in; callers
//! who may read that namespace may read its windows and status, only its writers may append,
//! drain or free; to anyone else it does not exist ([`FabricError::NotFound`], the same answer
//! as for an id never issued). Ids are 128 random bits ([`ArenaHandle`]), so one request
//! cannot reach another's arena by counting, even within a tenant. Arenas live in memory only
//! and are gone when the node stops.

use std::collections::HashMap;
use std::fmt;
use std::sync::MutexGuard;

use kvfabric_store::arena::{Appended, ArenaError, ArenaId, ArenaLimits, Arenas};
use kvfabric_store::geometry::LayerScheme;
use kvfabric_store::{ByteCount, NamespaceKey};

use super::Fabric;
use crate::error::FabricError;
use crate::presets::Model;

/// The id of an arena as clients see it: 128 random bits (32 hex digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArenaHandle(pub [u8; 16]);

impl ArenaHandle {
    /// 32 hex digits (either case); `None` for anything else.
    pub fn parse(s: &str) -> Option<ArenaHandle> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ArenaHandle(out))
    }
}

impl fmt::Display for ArenaHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// One layer of an arena, as [`Fabric::arena_status`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaLayer {
    /// `csa`, `hca` or `swa`.
    pub scheme: LayerScheme,
    /// Rows ever appended (the request's tokens for this layer).
    pub appended: u64,
    /// Rows in its sliding window now (at most the window).
    pub window_rows: u32,
    /// Rows waiting in its open group (0 on a sliding-window-only layer).
    pub group_rows: u32,
    /// Rows of a complete group: the layer's compression (0 on a sliding-window-only layer).
    pub group_needed: u32,
}

/// An arena's state.
#[derive(Debug, Clone)]
pub struct ArenaStatus {
    /// Its id.
    pub handle: ArenaHandle,
    /// The preset it was created for.
    pub model: String,
    /// Bytes it holds, fixed at creation (the geometry's sizing rule).
    pub bytes: ByteCount,
    /// Bytes of one row (RoPE dims then content dims).
    pub row_bytes: usize,
    /// Rows of each layer's window.
    pub window: u32,
    /// Every layer, in order.
    pub layers: Vec<ArenaLayer>,
}

/// What appending one token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenAppended {
    /// Tokens appended so far (rows of layer 0).
    pub tokens: u64,
    /// Layers whose group this token completed: drain each before the next token.
    pub complete: Vec<u32>,
}

/// A layer's rows handed out: the window (oldest first) or a drained group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArenaRows {
    /// The rows, back to back.
    pub bytes: Vec<u8>,
    /// How many.
    pub rows: u32,
}

/// The node's arenas and who owns each.
pub(crate) struct ArenaTable {
    arenas: Arenas,
    owners: HashMap<ArenaHandle, (NamespaceKey, ArenaId)>,
    /// Key of the handle generator: from the OS's random source, at the first create.
    key: Option<[u8; 32]>,
}

impl ArenaTable {
    /// An empty table with `limits`.
    pub(crate) fn new(limits: ArenaLimits) -> ArenaTable {
        ArenaTable {
            arenas: Arenas::new(limits),
            owners: HashMap::new(),
            key: None,
        }
    }

    /// A handle no live arena has, for the arena `id`: the first 128 bits of
    /// `blake3_keyed(key, id)`.
    fn fresh_handle(&mut self, id: ArenaId) -> Result<ArenaHandle, FabricError> {
        let key = match self.key {
            Some(k) => k,
            None => {
                let mut k = [0u8; 32];
                getrandom::fill(&mut k).map_err(|e| FabricError::Random(e.to_string()))?;
                *self.key.insert(k)
            }
        };
        let mut out = [0u8; 16];
        out.copy_from_slice(&blake3::keyed_hash(&key, &id.0.to_le_bytes()).as_bytes()[..16]);
        let handle = ArenaHandle(out);
        if self.owners.contains_key(&handle) {
            // Two ids under one key never give one 128-bit handle in practice; never hand a
            // live handle out twice all the same.
            return Err(FabricError::Random(format!(
                "arena handle {handle} collided; retry"
            )));
        }
        Ok(handle)
    }

    /// Live arenas and the bytes they hold.
    pub(crate) fn usage(&self) -> (usize, ByteCount) {
        (self.arenas.len(), self.arenas.bytes())
    }
}

/// What a call may do with an arena.
#[derive(Clone, Copy)]
enum Access<'a> {
    /// Read: any namespace of these.
    Read(&'a [NamespaceKey]),
    /// Change: this namespace only (`read` decides 403 against 404).
    Write(NamespaceKey, &'a [NamespaceKey]),
}

impl ArenaTable {
    fn find(&self, handle: ArenaHandle, access: Access<'_>) -> Result<ArenaId, FabricError> {
        let Some(&(ns, id)) = self.owners.get(&handle) else {
            return Err(FabricError::NotFound);
        };
        match access {
            Access::Read(read) if read.contains(&ns) => Ok(id),
            Access::Write(write, _) if write == ns => Ok(id),
            Access::Write(_, read) if read.contains(&ns) => Err(FabricError::ArenaForbidden),
            _ => Err(FabricError::NotFound),
        }
    }

    fn status(&self, handle: ArenaHandle, id: ArenaId) -> Result<ArenaStatus, ArenaError> {
        let a = self.arenas.get(id)?;
        let layers = (0..a.layers())
            .map(|l| {
                let scheme = a.scheme(l)?;
                Ok(ArenaLayer {
                    scheme,
                    appended: a.appended(l)?,
                    window_rows: a.window(l)?.len() as u32,
                    group_rows: a.group_len(l)?,
                    group_needed: a.group_needed(l)?,
                })
            })
            .collect::<Result<Vec<_>, ArenaError>>()?;
        Ok(ArenaStatus {
            handle,
            model: self.arenas.model(id)?.to_owned(),
            bytes: a.bytes(),
            row_bytes: a.row_bytes(),
            window: a.window_rows(),
            layers,
        })
    }
}

impl Fabric {
    fn arenas(&self) -> Result<MutexGuard<'_, ArenaTable>, FabricError> {
        self.arenas.lock().map_err(|_| FabricError::Poisoned)
    }

    /// Creates an arena for one request of `model` (a hybrid preset) in `ns`, allocated at its
    /// full size; refused when the table is at `arenas_max` or `bytes_max`.
    pub fn arena_create(
        &self,
        ns: NamespaceKey,
        model: &Model,
    ) -> Result<ArenaStatus, FabricError> {
        let mut t = self.arenas()?;
        let id = t.arenas.create(&model.geometry)?;
        let handle = match t.fresh_handle(id) {
            Ok(h) => h,
            Err(e) => {
                t.arenas.free(id)?;
                return Err(e);
            }
        };
        t.owners.insert(handle, (ns, id));
        Ok(t.status(handle, id)?)
    }

    /// The arena's state, to callers who may read `read`.
    pub fn arena_status(
        &self,
        read: &[NamespaceKey],
        handle: ArenaHandle,
    ) -> Result<ArenaStatus, FabricError> {
        let t = self.arenas()?;
        let id = t.find(handle, Access::Read(read))?;
        Ok(t.status(handle, id)?)
    }

    /// Appends one token's rows of every layer (layer order, `layers × row_bytes` bytes), or
    /// nothing (see [`kvfabric_store::arena::RequestArena::append_token`]).
    pub fn arena_append_token(
        &self,
        write: NamespaceKey,
        read: &[NamespaceKey],
        handle: ArenaHandle,
        rows: &[u8],
    ) -> Result<TokenAppended, FabricError> {
        let mut t = self.arenas()?;
        let id = t.find(handle, Access::Write(write, read))?;
        let done = t.arenas.append_token(id, rows)?;
        let complete = done
            .iter()
            .enumerate()
            .filter(|(_, a)| **a == Appended::GroupComplete)
            .map(|(l, _)| l as u32)
            .collect();
        Ok(TokenAppended {
            tokens: t.arenas.get(id)?.appended(0)?,
            complete,
        })
    }

    /// Appends `layer`'s next row; returns the layer's state after it.
    pub fn arena_append_row(
        &self,
        write: NamespaceKey,
        read: &[NamespaceKey],
        handle: ArenaHandle,
        layer: u32,
        row: &[u8],
    ) -> Result<ArenaLayer, FabricError> {
        let mut t = self.arenas()?;
        let id = t.find(handle, Access::Write(write, read))?;
        t.arenas.append(id, layer, row)?;
        let status = t.status(handle, id)?;
        Ok(status.layers[layer as usize])
    }

    /// `layer`'s window, oldest row first, to callers who may read `read`.
    pub fn arena_window(
        &self,
        read: &[NamespaceKey],
        handle: ArenaHandle,
        layer: u32,
    ) -> Result<ArenaRows, FabricError> {
        let t = self.arenas()?;
        let id = t.find(handle, Access::Read(read))?;
        let w = t.arenas.window(id, layer)?;
        let (older, newer) = w.as_slices();
        Ok(ArenaRows {
            bytes: [older, newer].concat(),
            rows: w.len() as u32,
        })
    }

    /// Hands over `layer`'s completed group (its `compression` rows, oldest first) and empties
    /// it, so the layer takes rows again.
    pub fn arena_drain(
        &self,
        write: NamespaceKey,
        read: &[NamespaceKey],
        handle: ArenaHandle,
        layer: u32,
    ) -> Result<ArenaRows, FabricError> {
        let mut t = self.arenas()?;
        let id = t.find(handle, Access::Write(write, read))?;
        let row_bytes = t.arenas.get(id)?.row_bytes();
        let bytes = t.arenas.drain_group(id, layer)?.to_vec();
        Ok(ArenaRows {
            rows: (bytes.len() / row_bytes) as u32,
            bytes,
        })
    }

    /// Frees the arena (the request ended); returns the bytes given back.
    pub fn arena_free(
        &self,
        write: NamespaceKey,
        read: &[NamespaceKey],
        handle: ArenaHandle,
    ) -> Result<ByteCount, FabricError> {
        let mut t = self.arenas()?;
        let id = t.find(handle, Access::Write(write, read))?;
        let freed = t.arenas.free(id)?;
        t.owners.remove(&handle);
        Ok(freed)
    }

    /// Live arenas and the bytes they hold (for metrics).
    pub fn arena_usage(&self) -> Result<(usize, ByteCount), FabricError> {
        Ok(self.arenas()?.usage())
    }

    /// The bounds of the arena table.
    pub fn arena_limits(&self) -> Result<ArenaLimits, FabricError> {
        Ok(self.arenas()?.arenas.limits())
    }
}

#[cfg(test)]
mod tests {
    use super::ArenaHandle;

    #[test]
    fn handles_are_32_hex_digits_both_ways() {
        let h = ArenaHandle([0xab; 16]);
        let s = h.to_string();
        assert_eq!(s, "ab".repeat(16));
        assert_eq!(ArenaHandle::parse(&s), Some(h));
        assert_eq!(ArenaHandle::parse(&s.to_uppercase()), Some(h));
        for bad in [
            "",
            "ab",
            &"ab".repeat(17),
            &format!("{}zz", "ab".repeat(15)),
            "é",
        ] {
            assert_eq!(ArenaHandle::parse(bad), None, "{bad:?}");
        }
    }
}
