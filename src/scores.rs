//! The answer to a find.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::{WorkerId, WorkerKey};

/// For each worker that probably holds a prefix of the query, how much of it.
///
/// ```
/// use approx_kv_index::{ApproxKvIndexer, Query};
/// let index = ApproxKvIndexer::new(4, std::time::Duration::from_secs(60)).unwrap();
/// index.record(3, Query::tokens(&[1, 2, 3, 4, 5, 6, 7, 8])).unwrap();
/// let found = index.find(Query::tokens(&[1, 2, 3, 4, 9, 9, 9, 9]));
/// assert_eq!(found.scores[&3], 1); // the first block matches, the second does not
/// assert_eq!(found.tree_sizes[&3], 2); // worker 3 holds two blocks in all
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlapScores<W: WorkerKey = WorkerId> {
    /// Number of leading blocks of the query that the worker holds. Workers with none are absent.
    pub scores: HashMap<W, u32, FxBuildHasher>,
    /// Blocks held by each worker of `scores`, across the whole index: entries stored and
    /// not yet reclaimed, so it may count entries that expired less than a sweep ago.
    pub tree_sizes: HashMap<W, usize, FxBuildHasher>,
}

impl<W: WorkerKey> Default for OverlapScores<W> {
    fn default() -> Self {
        Self {
            scores: HashMap::default(),
            tree_sizes: HashMap::default(),
        }
    }
}

impl<W: WorkerKey> OverlapScores<W> {
    /// The worker with the highest score (the lowest key among equals), if any.
    pub fn best(&self) -> Option<(W, u32)> {
        self.scores
            .iter()
            .map(|(&w, &s)| (w, s))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }
}

/// Where a find writes its answer: [`ApproxKvIndexer::find_into`](crate::ApproxKvIndexer::find_into)
/// reports each worker that holds a prefix of the query, once, to a sink.
///
/// Implemented for [`OverlapScores`] (scores and tree sizes, reused across finds: once
/// its maps have grown, a find allocates nothing) and for every `FnMut(W, u32)` (called
/// with each worker and its score, nothing stored). A sink of your own can take scores
/// straight into a router's load table.
///
/// ```
/// use approx_kv_index::{ApproxKvIndexer, Query, ScoreSink, WorkerId};
///
/// /// The deepest match only.
/// #[derive(Default)]
/// struct Deepest(Option<(WorkerId, u32)>);
///
/// impl ScoreSink<WorkerId> for Deepest {
///     fn begin(&mut self) {
///         self.0 = None;
///     }
///     fn report(&mut self, worker: WorkerId, score: u32, _entries: usize) {
///         if self.0.map_or(true, |(w, s)| (score, std::cmp::Reverse(worker)) > (s, std::cmp::Reverse(w))) {
///             self.0 = Some((worker, score));
///         }
///     }
/// }
///
/// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
/// index.record(1, Query::tokens(&[1, 2, 3, 4])).unwrap();
/// index.record(2, Query::tokens(&[1, 2, 9, 9])).unwrap();
/// let mut deepest = Deepest::default();
/// index.find_into(Query::tokens(&[1, 2, 3, 4]), &mut deepest);
/// assert_eq!(deepest.0, Some((1, 2)));
///
/// let mut total = 0;
/// index.find_into(Query::tokens(&[1, 2, 3, 4]), &mut |_worker, score| total += score);
/// assert_eq!(total, 3);
/// ```
pub trait ScoreSink<W: WorkerKey> {
    /// A find starts: forget any earlier answer. By default, nothing.
    #[inline]
    fn begin(&mut self) {}

    /// About `workers` more workers may be reported. By default, nothing.
    #[inline]
    fn reserve(&mut self, workers: usize) {
        let _ = workers;
    }

    /// `worker` probably holds the query's first `score` blocks (at least 1), and
    /// `entries` blocks across the index (0 unless [`wants_entries`](Self::wants_entries)
    /// says yes). Each worker is reported at most once per find, in no particular order.
    fn report(&mut self, worker: W, score: u32, entries: usize);

    /// Whether [`report`](Self::report) uses `entries`: a find that need not read each
    /// worker's count reads less memory. By default, no.
    #[inline]
    fn wants_entries(&self) -> bool {
        false
    }
}

impl<W: WorkerKey> ScoreSink<W> for OverlapScores<W> {
    fn begin(&mut self) {
        self.scores.clear();
        self.tree_sizes.clear();
    }

    fn reserve(&mut self, workers: usize) {
        self.scores.reserve(workers);
        self.tree_sizes.reserve(workers);
    }

    #[inline]
    fn report(&mut self, worker: W, score: u32, entries: usize) {
        self.scores.insert(worker, score);
        self.tree_sizes.insert(worker, entries);
    }

    #[inline]
    fn wants_entries(&self) -> bool {
        true
    }
}

/// A callback: `visit(worker, score)` per worker, nothing stored.
impl<W: WorkerKey, F: FnMut(W, u32)> ScoreSink<W> for F {
    #[inline]
    fn report(&mut self, worker: W, score: u32, _: usize) {
        self(worker, score);
    }
}
