//! The calls of Dynamo's approximate indexer (`find_matches*`, `process_routing_decision*`,
//! and their `_into`, `_with` and `_salted` forms), as thin wrappers of [`ApproxKvIndexer::find`], [`find_into`](ApproxKvIndexer::find_into)
//! and [`record`](ApproxKvIndexer::record) with a [`Query`]: a router written against
//! Dynamo's names keeps its calls and their meaning. They are synchronous (no `.await`,
//! no `CancellationToken`), take slices, and return their answer rather than a `Result`
//! (but `process_routing_decision`). New code can use either; each wrapper costs what the
//! call it wraps costs.

use crate::query::Query;
use crate::scores::OverlapScores;
use crate::{ApproxKvIndexer, HashSalt, LocalBlockHash, RecordError, SequenceHash, WorkerKey};

impl<W: WorkerKey> ApproxKvIndexer<W> {
    /// The same as `record(worker, Query::tokens(tokens))`: see [`record`](Self::record).
    ///
    /// Records that `worker` was chosen for a prompt of `tokens`: its full blocks become
    /// "probably cached on `worker`" for one TTL (refreshing any it already held).
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4, 5], 9); // 2 full blocks
    /// assert_eq!(index.find_matches_for_request(&[1, 2, 3, 4, 5, 6]).scores[&9], 2);
    /// ```
    pub fn process_routing_decision_for_request(&self, tokens: &[u32], worker: W) {
        let _ = self.record(worker, Query::tokens(tokens)); // tokens always have local hashes
    }

    /// The same as `record(worker, Query::salted_tokens(tokens, salt))`: see [`record`](Self::record).
    ///
    /// As [`process_routing_decision_for_request`](Self::process_routing_decision_for_request),
    /// for a request under a LoRA adapter or cache namespace: its blocks only ever match
    /// finds with the same [`HashSalt`].
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, HashSalt};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let tenant_a = HashSalt::new(None, Some("tenant-a"));
    /// index.process_routing_decision_for_request_salted(&[1, 2, 3, 4], 1, tenant_a);
    /// assert_eq!(index.find_matches_for_request_salted(&[1, 2, 3, 4], tenant_a).scores[&1], 2);
    /// assert!(index.find_matches_for_request(&[1, 2, 3, 4]).scores.is_empty());
    /// ```
    pub fn process_routing_decision_for_request_salted(
        &self,
        tokens: &[u32],
        worker: W,
        salt: HashSalt,
    ) {
        let _ = self.record(worker, Query::salted_tokens(tokens, salt));
    }

    /// The same as `record(worker, Query::hashes(local, seq))`: see [`record`](Self::record).
    ///
    /// Records a decision from precomputed hashes (as
    /// [`compute_block_hash_for_seq`](crate::compute_block_hash_for_seq) and
    /// [`compute_seq_hashes`](crate::compute_seq_hashes) make them). Slices of different lengths are an error and
    /// store nothing. The blocks are placed by the chain of `local` (what finds look up,
    /// as Dynamo's radix tree walks local hashes): where `seq` is not that chain (hashes
    /// from another scheme, or wrong), the decision is recorded as if it were, so it is
    /// found by its blocks, expires, and counts toward caps like any other.
    ///
    /// ```
    /// use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(4, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 4);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(5, &local, &seq).unwrap();
    /// assert_eq!(index.find_matches(&local).scores[&5], 1);
    /// assert!(index.process_routing_decision(5, &local, &[]).is_err());
    /// // Sequence hashes that are not the chain: placed by the chain all the same.
    /// index.process_routing_decision(6, &local, &[SequenceHash(7)]).unwrap();
    /// assert_eq!(index.find_matches(&local).scores[&6], 1);
    /// ```
    pub fn process_routing_decision(
        &self,
        worker: W,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) -> Result<(), RecordError> {
        self.record(worker, Query::hashes(local, seq))
    }

    /// The same as `find(Query::tokens(tokens))`: see [`find`](Self::find).
    ///
    /// For each worker, how many leading blocks of `tokens` it probably holds.
    ///
    /// ```
    /// # use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 1);
    /// index.process_routing_decision_for_request(&[1, 2, 9, 9], 2);
    /// let found = index.find_matches_for_request(&[1, 2, 3, 4]);
    /// assert_eq!((found.scores[&1], found.scores[&2]), (2, 1));
    /// ```
    pub fn find_matches_for_request(&self, tokens: &[u32]) -> OverlapScores<W> {
        self.find(Query::tokens(tokens))
    }

    /// The same as `find(Query::salted_tokens(tokens, salt))`: see [`find`](Self::find).
    ///
    /// As [`find_matches_for_request`](Self::find_matches_for_request), under a
    /// [`HashSalt`] (LoRA adapter, cache namespace).
    pub fn find_matches_for_request_salted(
        &self,
        tokens: &[u32],
        salt: HashSalt,
    ) -> OverlapScores<W> {
        self.find(Query::salted_tokens(tokens, salt))
    }

    /// The same as `find_into(Query::tokens(tokens), out)`: see [`find_into`](Self::find_into).
    ///
    /// As [`find_matches_for_request`](Self::find_matches_for_request), into `out`
    /// (cleared first, then filled): with one `OverlapScores` kept per router thread, a
    /// warm find from tokens allocates nothing (the blocks' hashes go to a per-thread
    /// buffer).
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
    /// let mut found = OverlapScores::default();
    /// index.find_matches_for_request_into(&[1, 2, 3, 4], &mut found);
    /// assert_eq!(found.scores[&7], 2);
    /// index.find_matches_for_request_into(&[9, 9], &mut found); // reused
    /// assert!(found.scores.is_empty());
    /// ```
    pub fn find_matches_for_request_into(&self, tokens: &[u32], out: &mut OverlapScores<W>) {
        self.find_into(Query::tokens(tokens), out);
    }

    /// The same as `find_into(Query::salted_tokens(tokens, salt), out)`: see [`find_into`](Self::find_into).
    ///
    /// As [`find_matches_for_request_into`](Self::find_matches_for_request_into), under a
    /// [`HashSalt`].
    pub fn find_matches_for_request_salted_into(
        &self,
        tokens: &[u32],
        salt: HashSalt,
        out: &mut OverlapScores<W>,
    ) {
        self.find_into(Query::salted_tokens(tokens, salt), out);
    }

    /// The same as `find(Query::blocks(local))`: see [`find`](Self::find).
    ///
    /// For each worker, how many leading blocks of `local` it probably holds.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// assert!(index.find_matches(&[LocalBlockHash(1)]).scores.is_empty());
    /// ```
    pub fn find_matches(&self, local: &[LocalBlockHash]) -> OverlapScores<W> {
        self.find(Query::blocks(local))
    }

    /// The same as `find_into(Query::blocks(local), out)`: see [`find_into`](Self::find_into).
    ///
    /// As [`find_matches`](Self::find_matches), into `out`: cleared first, then filled.
    /// A router that keeps one `OverlapScores` per thread and passes it to every find
    /// allocates nothing once its maps have grown to the number of workers that match.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let mut found = OverlapScores::default();
    /// index.find_matches_into(&local, &mut found);
    /// assert_eq!(found.scores[&7], 2);
    /// index.find_matches_into(&local[..1], &mut found); // reused: the old answer is gone
    /// assert_eq!(found.scores[&7], 1);
    /// # index.find_matches_into(&[], &mut found);
    /// # assert!(found.scores.is_empty() && found.tree_sizes.is_empty());
    /// ```
    pub fn find_matches_into(&self, local: &[LocalBlockHash], out: &mut OverlapScores<W>) {
        self.find_into(Query::blocks(local), out);
    }

    /// The same as `find(Query::sequence(seq))`: see [`find`](Self::find).
    ///
    /// As [`find_matches`](Self::find_matches), from the query's *sequence* hashes (what
    /// [`compute_seq_hashes`](crate::compute_seq_hashes) makes of its local hashes): for a
    /// router that hashes a prompt once and passes the same hashes to the find and to
    /// [`process_routing_decision`](Self::process_routing_decision), so the find chains
    /// nothing. Given `compute_seq_hashes(local)`, the answer is `find_matches(local)`'s.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4, 5, 6], 2);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(7, &local[..2], &seq[..2]).unwrap();
    /// let found = index.find_matches_by_sequence(&seq);
    /// assert_eq!(found.scores[&7], 2);
    /// assert_eq!(found, index.find_matches(&local));
    /// ```
    pub fn find_matches_by_sequence(&self, seq: &[SequenceHash]) -> OverlapScores<W> {
        self.find(Query::sequence(seq))
    }

    /// The same as `find_into(Query::sequence(seq), out)`: see [`find_into`](Self::find_into).
    ///
    /// As [`find_matches_by_sequence`](Self::find_matches_by_sequence), into `out`
    /// (cleared first, then filled; see [`find_matches_into`](Self::find_matches_into)).
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let seq = compute_seq_hashes(&compute_block_hash_for_seq(&[1, 2, 3, 4], 2));
    /// let mut found = OverlapScores::default();
    /// index.find_matches_by_sequence_into(&seq, &mut found);
    /// assert!(found.scores.is_empty());
    /// ```
    pub fn find_matches_by_sequence_into(&self, seq: &[SequenceHash], out: &mut OverlapScores<W>) {
        self.find_into(Query::sequence(seq), out);
    }

    /// The same as `find_into(Query::blocks(local), &mut visit)`: see [`find_into`](Self::find_into).
    ///
    /// As [`find_matches`](Self::find_matches), handing each worker's score to `visit`
    /// instead of building an [`OverlapScores`]: `visit(worker, score)` is called once for
    /// each worker that probably holds a leading run of the query (the workers and scores
    /// `find_matches` reports, in no particular order; no tree sizes). Allocates nothing
    /// once the thread's scratch has grown. `visit` runs inside the find, holding no lock:
    /// it may call the index, but what such a call changes may or may not show in the rest
    /// of this find's answer.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// index.process_routing_decision_for_request(&[1, 2, 3, 4], 7);
    /// index.process_routing_decision_for_request(&[1, 2], 8);
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let mut best = (0, 0);
    /// index.find_matches_with(&local, |worker, score| best = best.max((score, worker)));
    /// assert_eq!(best, (2, 7));
    /// ```
    pub fn find_matches_with(&self, local: &[LocalBlockHash], mut visit: impl FnMut(W, u32)) {
        self.find_into(Query::blocks(local), &mut visit);
    }

    /// The same as `find_into(Query::sequence(seq), &mut visit)`: see [`find_into`](Self::find_into).
    ///
    /// As [`find_matches_with`](Self::find_matches_with), from the query's sequence hashes
    /// (see [`find_matches_by_sequence`](Self::find_matches_by_sequence)): the router's
    /// hashes, computed once, and no allocation, the cheapest find.
    ///
    /// ```
    /// # use approx_kv_index::*;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let local = compute_block_hash_for_seq(&[1, 2, 3, 4], 2);
    /// let seq = compute_seq_hashes(&local);
    /// index.process_routing_decision(7, &local, &seq).unwrap();
    /// let mut found = Vec::new();
    /// index.find_matches_by_sequence_with(&seq[..1], |worker, score| found.push((worker, score)));
    /// assert_eq!(found, [(7, 1)]);
    /// ```
    pub fn find_matches_by_sequence_with(
        &self,
        seq: &[SequenceHash],
        mut visit: impl FnMut(W, u32),
    ) {
        self.find_into(Query::sequence(seq), &mut visit);
    }
}
