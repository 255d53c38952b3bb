//! [`Arenas`]: the live per-request arenas of a node, each under an id, bounded in count and
//! bytes. Everything a per-request HTTP route needs: create (sized by the geometry), append
//! (a row of one layer, or a whole token), read a layer's window, drain a completed group,
//! free.

use std::collections::HashMap;
use std::fmt;

use super::{Appended, ArenaError, RequestArena, Window};
use crate::geometry::ModelGeometry;
use crate::units::ByteCount;

/// The id of a live arena (never reused within one table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArenaId(pub u64);

impl fmt::Display for ArenaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Bounds of an [`Arenas`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaLimits {
    /// Most arenas live at once.
    pub arenas_max: u32,
    /// Most bytes all live arenas may hold together.
    pub bytes_max: ByteCount,
}

struct Entry {
    model: String,
    arena: RequestArena,
}

/// The live arenas of a node.
pub struct Arenas {
    limits: ArenaLimits,
    next: u64,
    live: HashMap<ArenaId, Entry>,
    bytes: ByteCount,
}

impl Arenas {
    /// An empty table.
    pub fn new(limits: ArenaLimits) -> Arenas {
        Arenas {
            limits,
            next: 1,
            live: HashMap::new(),
            bytes: ByteCount(0),
        }
    }

    /// Creates an arena for one request of `g` (a hybrid model), allocated at its full size,
    /// or refuses it when the table is at a bound (nothing is allocated then).
    pub fn create(&mut self, g: &ModelGeometry) -> Result<ArenaId, ArenaError> {
        if self.live.len() >= self.limits.arenas_max as usize {
            return Err(ArenaError::TooManyArenas {
                max: self.limits.arenas_max,
            });
        }
        let needed = RequestArena::size_for(g)?;
        if self.bytes.0 + needed.0 > self.limits.bytes_max.0 {
            return Err(ArenaError::OverBudget {
                needed,
                used: self.bytes,
                max: self.limits.bytes_max,
            });
        }
        let arena = RequestArena::new(g)?;
        let id = ArenaId(self.next);
        self.next += 1;
        self.bytes = ByteCount(self.bytes.0 + arena.bytes().0);
        self.live.insert(
            id,
            Entry {
                model: g.name.clone(),
                arena,
            },
        );
        Ok(id)
    }

    fn entry(&self, id: ArenaId) -> Result<&Entry, ArenaError> {
        self.live.get(&id).ok_or(ArenaError::UnknownArena(id.0))
    }

    fn arena_mut(&mut self, id: ArenaId) -> Result<&mut RequestArena, ArenaError> {
        self.live
            .get_mut(&id)
            .map(|e| &mut e.arena)
            .ok_or(ArenaError::UnknownArena(id.0))
    }

    /// The arena `id`.
    pub fn get(&self, id: ArenaId) -> Result<&RequestArena, ArenaError> {
        Ok(&self.entry(id)?.arena)
    }

    /// The preset name the arena was created for.
    pub fn model(&self, id: ArenaId) -> Result<&str, ArenaError> {
        Ok(&self.entry(id)?.model)
    }

    /// Appends `layer`'s next row (see [`RequestArena::append`]).
    pub fn append(&mut self, id: ArenaId, layer: u32, row: &[u8]) -> Result<Appended, ArenaError> {
        self.arena_mut(id)?.append(layer, row)
    }

    /// Appends one token's rows of every layer (see [`RequestArena::append_token`]).
    pub fn append_token(&mut self, id: ArenaId, rows: &[u8]) -> Result<Vec<Appended>, ArenaError> {
        self.arena_mut(id)?.append_token(rows)
    }

    /// `layer`'s window, oldest row first.
    pub fn window(&self, id: ArenaId, layer: u32) -> Result<Window<'_>, ArenaError> {
        self.get(id)?.window(layer)
    }

    /// Hands over `layer`'s completed group and empties it (see [`RequestArena::drain_group`]).
    pub fn drain_group(&mut self, id: ArenaId, layer: u32) -> Result<&[u8], ArenaError> {
        self.arena_mut(id)?.drain_group(layer)
    }

    /// Frees the arena `id` (the request ended); returns the bytes given back.
    pub fn free(&mut self, id: ArenaId) -> Result<ByteCount, ArenaError> {
        let e = self
            .live
            .remove(&id)
            .ok_or(ArenaError::UnknownArena(id.0))?;
        let freed = e.arena.bytes();
        self.bytes = ByteCount(self.bytes.0 - freed.0);
        Ok(freed)
    }

    /// Live arenas.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no arena is live.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Bytes held by live arenas.
    pub fn bytes(&self) -> ByteCount {
        self.bytes
    }

    /// The table's bounds.
    pub fn limits(&self) -> ArenaLimits {
        self.limits
    }
}
