//! The answer to a find.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::{WorkerId, WorkerKey};

/// For each worker that probably holds a prefix of the query, how much of it.
///
/// ```
/// use approx_kv_index::ApproxKvIndexer;
/// let index = ApproxKvIndexer::new(4, std::time::Duration::from_secs(60)).unwrap();
/// index.process_routing_decision_for_request(&[1, 2, 3, 4, 5, 6, 7, 8], 3);
/// let found = index.find_matches_for_request(&[1, 2, 3, 4, 9, 9, 9, 9]);
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

/// Where a find writes its answer: a reused [`OverlapScores`], or a caller's callback
/// ([`ScoreVisitor`]).
pub(crate) trait ScoreSink<W: WorkerKey> {
    /// A find starts: forget any earlier answer.
    fn begin(&mut self);
    /// About `workers` more workers may be reported.
    fn reserve(&mut self, workers: usize);
    /// `worker` holds the query's first `score` blocks, and `entries` blocks in all (0
    /// when [`wants_entries`](Self::wants_entries) says no).
    fn report(&mut self, worker: W, score: u32, entries: usize);
    /// Whether `report` uses `entries`: a find that need not read each worker's count
    /// reads only the slots' dense keys.
    #[inline]
    fn wants_entries(&self) -> bool {
        true
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
}

/// A callback as a [`ScoreSink`]: `visit(worker, score)` per worker, nothing stored.
pub(crate) struct ScoreVisitor<F>(pub(crate) F);

impl<W: WorkerKey, F: FnMut(W, u32)> ScoreSink<W> for ScoreVisitor<F> {
    fn begin(&mut self) {}

    fn reserve(&mut self, _: usize) {}

    #[inline]
    fn report(&mut self, worker: W, score: u32, _: usize) {
        (self.0)(worker, score);
    }

    #[inline]
    fn wants_entries(&self) -> bool {
        false
    }
}
