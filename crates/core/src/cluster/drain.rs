//! The leaving member's side of a removal: before it goes, every block it holds gets
//! `replication` copies on voters other than itself ([`crate::decide::drain`]), each copy
//! taken by the voter from this member over the block transport and verified like any other
//! ([`Cluster::copy_to_peers`]).
//!
//! The coordinator of the removal asks with `Drain` on the control channel and polls: the
//! first request starts a background drain (passes until none remains), each answers how far
//! it is, and the answer is `done` only when no drain runs and a fresh look at the directory
//! replica finds nothing left, so that blocks put here while the drain ran are covered too.
//! Nothing here is remembered across a restart: a drain cut short is started again by the
//! next request (the copies already made count in the directory, so it resumes where it was).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Cluster;
use crate::decide::drain::{plan, DrainCopy};

/// Pause between two drain passes that left blocks to copy (a copy's registration reaches
/// this replica moments after it is made).
const PASS_PAUSE_MS: u64 = 200;

/// How a member's drain stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DrainProgress {
    /// Blocks held.
    pub(crate) held: u64,
    /// Copies made since the drain started.
    pub(crate) copied: u64,
    /// Held blocks still short of copies on other voters.
    pub(crate) remaining: u64,
    /// No drain runs and none remains.
    pub(crate) done: bool,
}

/// The drain task of this member, if one was started.
#[derive(Default)]
pub(crate) struct Drainer {
    task: Mutex<Option<JoinHandle<()>>>,
    copied: Arc<AtomicU64>,
}

impl Drainer {
    /// Stops a running drain (shutdown).
    pub(crate) fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

impl Cluster {
    /// What this member still has to copy before it may leave.
    fn drain_plan(&self) -> Result<(u64, Vec<DrainCopy>), String> {
        let held = self.local.held_keys().map_err(|e| e.to_string())?;
        let voters = self.voters();
        let copies = plan(
            self.me,
            self.config.replication as usize,
            &held,
            &voters,
            |ns, id| {
                self.live_holders(&super::directory_block(ns, *id))
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect()
            },
        );
        Ok((held.len() as u64, copies))
    }

    /// Starts the drain if none runs and something remains; how far it is.
    pub(crate) fn drain(self: &Arc<Self>) -> Result<DrainProgress, String> {
        let (held, copies) = self.drain_plan()?;
        let copied = self.drainer.copied.load(Ordering::Relaxed);
        let mut task = self.drainer.task.lock().unwrap_or_else(|p| p.into_inner());
        let running = task.as_ref().is_some_and(|t| !t.is_finished());
        if !running && !copies.is_empty() {
            let cluster = self.clone();
            *task = Some(tokio::spawn(async move { cluster.drain_passes().await }));
            tracing::info!(
                held,
                remaining = copies.len(),
                "draining: copying what only this member holds enough of"
            );
        }
        Ok(DrainProgress {
            held,
            copied,
            remaining: copies.len() as u64,
            done: !running && copies.is_empty(),
        })
    }

    /// Drain passes until a pass finds nothing left.
    async fn drain_passes(self: Arc<Self>) {
        loop {
            let copies = match self.drain_plan() {
                Ok((_, c)) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "draining: reading the store");
                    return;
                }
            };
            if copies.is_empty() {
                tracing::info!("drained");
                return;
            }
            for c in copies {
                let made = self
                    .copy_to_peers(c.ns, c.id, c.need, &c.holders)
                    .await
                    .len();
                self.drainer
                    .copied
                    .fetch_add(made as u64, Ordering::Relaxed);
                if made < c.need {
                    tracing::warn!(block = %c.id, need = c.need, made, "draining: copies not made; retrying next pass");
                }
            }
            tokio::time::sleep(Duration::from_millis(PASS_PAUSE_MS)).await;
        }
    }
}
