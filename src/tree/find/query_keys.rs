//! A find's query and the keys its probes read: sequence hashes as the caller gave them,
//! or chained from local hashes as far as the probes need.

use crate::hash::SeqChain;
use crate::prefetch::prefetch;
use crate::tree::run_alloc::QueryKeys;
use crate::{LocalBlockHash, SequenceHash};

/// A find's query: its blocks' local hashes (the find chains them into sequence hashes as
/// far as its probes need), or their sequence hashes, computed once by the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) enum HashedQuery<'a> {
    /// Local hashes, chained here.
    Local(&'a [LocalBlockHash]),
    /// Sequence hashes, probed as they are.
    Seq(&'a [SequenceHash]),
}

impl HashedQuery<'_> {
    pub(super) fn len(self) -> usize {
        match self {
            HashedQuery::Local(local) => local.len(),
            HashedQuery::Seq(seq) => seq.len(),
        }
    }

    /// Starts loading the first and the last key of a query of sequence hashes, which the
    /// find's first two probes read (a query hashed long ago is out of cache): called
    /// first thing, so that the misses overlap the find's setup (pinning, the clock).
    /// Only those two lines: prefetching every line of a long query took the line-fill
    /// buffers that the probes' own misses need (find p50 on the conversation trace
    /// 0.78 -> 0.71 µs). Nothing for local hashes, which the find chains as far as it
    /// needs.
    #[inline]
    pub(crate) fn preload(self) {
        if let HashedQuery::Seq(seq) = self {
            if let Some(first) = seq.first() {
                prefetch(first);
            }
            if let Some(last) = seq.last() {
                prefetch(last);
            }
        }
    }
}

/// The longest query of local hashes that a galloping find chains whole to probe its last
/// block first (at most this many hashes, about 0.15 µs); a longer one gallops from block 0
/// and chains only as far as it probes.
pub(super) const CHAINED_FOR_THE_LAST: usize = 32;

/// A query's node keys as a find reads them: chained from local hashes into `chained` as
/// far as needed.
pub(super) struct Keys<'q, 's> {
    pub(super) query: HashedQuery<'q>,
    chain: SeqChain,
    chained: &'s mut Vec<SequenceHash>,
}

impl<'q, 's> Keys<'q, 's> {
    pub(super) fn new(query: HashedQuery<'q>, chained: &'s mut Vec<SequenceHash>) -> Self {
        Self {
            query,
            chain: SeqChain::default(),
            chained,
        }
    }

    /// Chains the local hashes of a local query up to block `end` (exclusive).
    #[inline]
    fn chain_to(&mut self, local: &[LocalBlockHash], end: usize) {
        while self.chained.len() < end {
            let next = self.chain.next(local[self.chained.len()]);
            self.chained.push(next);
        }
    }
}

impl QueryKeys for Keys<'_, '_> {
    #[inline]
    fn key(&mut self, k: usize) -> u64 {
        match self.query {
            HashedQuery::Seq(seq) => seq[k].0,
            HashedQuery::Local(local) => {
                self.chain_to(local, k + 1);
                self.chained[k].0
            }
        }
    }

    #[inline]
    fn keys(&mut self, range: std::ops::Range<usize>) -> &[SequenceHash] {
        match self.query {
            HashedQuery::Seq(seq) => &seq[range],
            HashedQuery::Local(local) => {
                self.chain_to(local, range.end);
                &self.chained[range]
            }
        }
    }

    #[inline]
    fn at_hand(&self) -> bool {
        matches!(self.query, HashedQuery::Seq(_))
    }
}
