//! The in-memory index: one small summary per retained sealed segment, never per entry, so memory
//! stays flat however many entries pass through the log.

use std::collections::VecDeque;
use std::sync::Arc;

use super::LogStats;
use super::meta::SegmentMeta;

/// Shared marker of a sealed segment: snapshots hold clones, and retention deletes a folded
/// segment's files only once no clone is left, so a snapshot can always open what it lists.
pub(crate) type Pin = Arc<()>;

/// One retained sealed segment.
#[derive(Debug)]
pub(crate) struct Sealed {
    pub meta: SegmentMeta,
    pub pin: Pin,
}

/// The retained sealed segments, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Index {
    sealed: VecDeque<Sealed>,
}

impl Index {
    pub(crate) fn push(&mut self, meta: SegmentMeta) {
        self.sealed.push_back(Sealed {
            meta,
            pin: Arc::new(()),
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.sealed.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Sealed> {
        self.sealed.iter()
    }

    /// Removes the `n` oldest segments.
    pub(crate) fn pop_oldest(&mut self, n: usize) -> Vec<Sealed> {
        let n = n.min(self.sealed.len());
        self.sealed.drain(..n).collect()
    }

    pub(crate) fn disk_bytes(&self) -> u64 {
        self.sealed.iter().map(|s| s.meta.disk_bytes()).sum()
    }
}

/// Adds one segment's counts to `stats`.
pub(crate) fn add_to_stats(stats: &mut LogStats, meta: &SegmentMeta) {
    stats.events += meta.events;
    stats.objects += meta.objects;
    stats.lifecycles += meta.lifecycles;
    if let Some(first) = meta.first_ms {
        stats.oldest_ms = Some(stats.oldest_ms.map_or(first, |o| o.min(first)));
    }
    if let Some(last) = meta.last_ms {
        stats.newest_ms = Some(stats.newest_ms.map_or(last, |n| n.max(last)));
    }
    for (kind, totals) in &meta.kinds {
        match stats.kinds.get_mut(kind) {
            Some(sum) => {
                sum.applies += totals.applies;
                sum.deletes += totals.deletes;
                sum.lifecycles += totals.lifecycles;
            }
            None => {
                stats.kinds.insert(kind.clone(), totals.clone());
            }
        }
    }
}
