//! Recording a concurrent history: invocations and completions with timestamps.

use std::sync::Mutex;
use std::time::Instant;

/// What a client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Set the register to a value (values should be unique per history).
    Write(u64),
    /// Read the register.
    Read,
}

/// What the client was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    /// The write completed.
    Written,
    /// The read returned this value (`None`: never written).
    Read(Option<u64>),
}

/// One operation of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The client that ran it (for reports).
    pub client: u32,
    /// The register.
    pub key: u64,
    /// What was asked.
    pub call: Call,
    /// When it was invoked, in ns since the history began.
    pub invoke_ns: u64,
    /// When it completed and with what; `None` while its outcome is unknown (pending).
    pub complete: Option<(u64, Ret)>,
}

/// A finished history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Every operation, in invocation order.
    pub ops: Vec<Operation>,
}

/// Refers to an invoked operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpHandle(usize);

/// Records operations from many clients at once.
#[derive(Debug)]
pub struct HistoryRecorder {
    start: Instant,
    ops: Mutex<Vec<Option<Operation>>>,
}

impl Default for HistoryRecorder {
    fn default() -> HistoryRecorder {
        HistoryRecorder::new()
    }
}

impl HistoryRecorder {
    /// An empty history starting now.
    pub fn new() -> HistoryRecorder {
        HistoryRecorder {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Operation>>> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an invocation; call right before issuing the operation.
    pub fn invoke(&self, client: u32, key: u64, call: Call) -> OpHandle {
        let mut ops = self.lock();
        // Timestamp under the lock so that recorded order matches time order.
        let op = Operation {
            client,
            key,
            call,
            invoke_ns: self.now_ns(),
            complete: None,
        };
        ops.push(Some(op));
        OpHandle(ops.len() - 1)
    }

    /// Records a completion; call right after the operation returned.
    pub fn complete(&self, h: OpHandle, ret: Ret) {
        let mut ops = self.lock();
        let now = self.now_ns();
        if let Some(Some(op)) = ops.get_mut(h.0) {
            op.complete = Some((now, ret));
        }
    }

    /// The operation certainly had no effect (a failed read, a refused write): forget it.
    pub fn discard(&self, h: OpHandle) {
        if let Some(slot) = self.lock().get_mut(h.0) {
            *slot = None;
        }
    }

    /// The operation's outcome is unknown: it stays pending.
    pub fn unknown(&self, _h: OpHandle) {}

    /// The history so far.
    pub fn history(&self) -> History {
        History {
            ops: self.lock().iter().flatten().copied().collect(),
        }
    }
}
