//! `node_down`: on a cluster node, a watcher of this node's replica of the directory that
//! publishes an [`EventKind::NodeDown`] when it sees a member's lease expire (the directory
//! marked it expired and purged its ownership records). Only transitions seen while this
//! node runs are reported: a member already expired when the watcher starts is not, nor is
//! this node itself (its own expiry ends in a re-announcement, `LocalNode::reannounce`).
//!
//! The event has no vLLM counterpart: on the ZeroMQ wire its batch carries no event (the
//! sequence number still advances, so the stream stays gap-free).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kvfabric_directory::Liveness;
use tokio::task::JoinHandle;

use super::{EventKind, EventLog};
use crate::cluster::Cluster;
use crate::ids::NodeId;

/// How often the directory replica is read.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// Starts the watcher; it ends when the log closes.
pub(crate) fn spawn(cluster: Arc<Cluster>, log: Arc<EventLog>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut closed = log.closed();
        let mut seen: HashMap<u64, (u64, bool)> = HashMap::new();
        let mut first = true;
        loop {
            if *closed.borrow() {
                return;
            }
            let now: Vec<(u64, u64, bool)> = cluster.directory.view().read(|s| {
                s.nodes()
                    .map(|(id, r)| (id.0, r.epoch.0, r.liveness == Liveness::Live))
                    .collect()
            });
            let mut events = Vec::new();
            for (id, epoch, live) in now {
                let before = seen.insert(id, (epoch, live));
                let went_down = match before {
                    Some((_, was_live)) => was_live && !live,
                    None => !first && !live,
                };
                // Not this node itself: it learns of its own expiry when its renewal is refused,
                // joins again and re-announces what it holds (`membership`), and a clear of its
                // own stream published after that re-announcement would contradict it.
                if went_down && id != log.node().0 {
                    events.push(EventKind::NodeDown {
                        node: NodeId(id),
                        epoch,
                    });
                }
            }
            first = false;
            for e in events {
                tracing::info!(?e, "events: a member's lease expired");
                log.publish(vec![e]);
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                _ = closed.changed() => return,
            }
        }
    })
}
