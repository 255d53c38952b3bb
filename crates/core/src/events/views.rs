//! What a tenant's event stream counts: the batches it can see, and no others.
//!
//! A batch's *class* is `None` when it carries an event every reader sees (an epoch, a member
//! going down), else the one namespace all its events are in: [`EventLog::publish`] splits a
//! batch of several namespaces into one batch per namespace ([`split`]), so every batch has a
//! class. [`ClassCounts`] counts batches by class, up to and including one batch. A reader of
//! namespaces `read` sees [`ClassCounts::visible`] of them up to that batch, so the batch's
//! position in that reader's view is one less: a gap-free number (0, 1, 2, … per epoch) that
//! does not move when batches of other namespaces are published. A tenant's stream shows these
//! positions ([`view_seq`]) and resumes from them ([`view_start`]); an operator's shows the
//! log's own sequence numbers.
//!
//! [`EventLog::publish`]: super::EventLog::publish

use std::collections::BTreeMap;

use kvfabric_store::NamespaceKey;

use super::{EventKind, ReplayGap};

/// A batch's class: `None` for one every reader sees, else its one namespace.
pub type Class = Option<NamespaceKey>;

/// The class of a batch of `events`; a batch of several namespaces and no event every reader
/// sees has none (it is to be [`split`]).
pub fn class_of(events: &[EventKind]) -> Option<Class> {
    let mut class: Option<NamespaceKey> = None;
    for e in events {
        match e.namespace() {
            None => return Some(None),
            Some(ns) if class.is_some_and(|c| c != *ns) => return None,
            Some(ns) => class = Some(*ns),
        }
    }
    Some(class)
}

/// `events` as batches of one class each, in order: one batch when it has a class, else one
/// per namespace (in the order each first appears; events keep their order within each).
pub fn split(events: Vec<EventKind>) -> Vec<Vec<EventKind>> {
    if class_of(&events).is_some() {
        return vec![events];
    }
    let mut groups: Vec<(NamespaceKey, Vec<EventKind>)> = Vec::new();
    for e in events {
        let ns = *e
            .namespace()
            .expect("a batch without a class has only namespaced events");
        match groups.iter_mut().find(|(g, _)| *g == ns) {
            Some((_, g)) => g.push(e),
            None => groups.push((ns, vec![e])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// Whether a reader of `read` sees a batch of `class`.
pub fn sees(class: &Class, read: &[NamespaceKey]) -> bool {
    class.as_ref().is_none_or(|ns| read.contains(ns))
}

/// Batches counted by class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassCounts(BTreeMap<Option<[u8; 32]>, u64>);

impl ClassCounts {
    /// Counts one more batch of `class`.
    pub fn add(&mut self, class: Class) {
        *self.0.entry(class.map(|k| k.0)).or_default() += 1;
    }

    /// The batches counted that a reader of `read` sees.
    pub fn visible(&self, read: &[NamespaceKey]) -> u64 {
        let of = |c: Class| self.0.get(&c.map(|k| k.0)).copied().unwrap_or(0);
        let mut n = of(None);
        for (i, ns) in read.iter().enumerate() {
            if !read[..i].contains(ns) {
                n += of(Some(*ns));
            }
        }
        n
    }
}

/// A batch's position in the view of a reader of `read`, given its class and the counts up to
/// and including it; `None` when that reader does not see it.
pub fn view_seq(class: &Class, counts: &ClassCounts, read: &[NamespaceKey]) -> Option<u64> {
    sees(class, read).then(|| counts.visible(read).saturating_sub(1))
}

/// Where a reader of `read` resuming from view position `since` starts in a ring of
/// `(position, class, counts)` (oldest first) whose counts after its newest entry are `total`:
/// the position of the first entry it sees at or after `since` (`None`: none yet, start with
/// the next one published). [`ReplayGap`] names the oldest view position still buffered when
/// `since` is older.
pub fn view_start<'a>(
    ring: impl Iterator<Item = (u64, &'a Class, &'a ClassCounts)>,
    total: &ClassCounts,
    read: &[NamespaceKey],
    since: u64,
) -> Result<Option<u64>, ReplayGap> {
    let mut ring = ring.peekable();
    let oldest = oldest_view(ring.peek().map(|(_, c, n)| (*c, *n)), total, read);
    if since < oldest {
        return Err(ReplayGap { oldest });
    }
    Ok(ring
        .find(|(_, class, counts)| sees(class, read) && counts.visible(read) > since)
        .map(|(pos, _, _)| pos))
}

/// The oldest view position a reader of `read` can still resume from: the one before the
/// oldest buffered entry (its class and counts; `None`: nothing buffered, so the next one,
/// from `total`, the counts after the newest).
pub fn oldest_view(
    oldest: Option<(&Class, &ClassCounts)>,
    total: &ClassCounts,
    read: &[NamespaceKey],
) -> u64 {
    match oldest {
        Some((class, counts)) => counts.visible(read) - u64::from(sees(class, read)),
        None => total.visible(read),
    }
}
