//! [`Query`]: one prompt in the form a caller has it, for [`find`](crate::ApproxKvIndexer::find),
//! [`find_into`](crate::ApproxKvIndexer::find_into) and [`record`](crate::ApproxKvIndexer::record).

use std::cell::RefCell;

use crate::error::RecordError;
use crate::hash::{self, HashSalt, PromptHashes};
use crate::thread_buffer::with_thread_buffer;
use crate::tree::HashedQuery;
use crate::{LocalBlockHash, SequenceHash};

/// One prompt, as tokens or as block hashes: what a find looks up and what a record stores.
///
/// | constructor | find | record |
/// |---|---|---|
/// | [`tokens`](Self::tokens), [`salted_tokens`](Self::salted_tokens) | hashes the full blocks | hashes the full blocks |
/// | [`blocks`](Self::blocks) (local block hashes) | chains them as far as it reads | chains them |
/// | [`sequence`](Self::sequence) (sequence hashes) | probes them as they are | `Err(RecordError::NoLocalHashes)` (empty: a record of nothing) |
/// | [`hashes`](Self::hashes) (both) | reads the local hashes | checks the lengths, places by the chain of the local hashes |
/// | [`prompt`](Self::prompt) (both, as [`PromptHashes`] made them) | probes the sequence hashes | stores both as they are |
///
/// Hashes are Dynamo's ([`compute_block_hash_for_seq`](crate::compute_block_hash_for_seq),
/// [`compute_seq_hashes`](crate::compute_seq_hashes)); a trailing partial block of tokens is
/// ignored. A record needs the local hashes: the index keeps them to dump, snapshot and
/// share its decisions.
///
/// ```
/// use approx_kv_index::{compute_block_hash_for_seq, ApproxKvIndexer, Query};
/// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
/// let prompt = [1, 2, 3, 4, 5];                      // two full blocks
/// index.record(3, Query::tokens(&prompt)).unwrap();
///
/// let local = compute_block_hash_for_seq(&prompt, 2); // the same blocks, hashed by the caller
/// assert_eq!(index.find(Query::tokens(&prompt)).scores[&3], 2);
/// assert_eq!(index.find(Query::blocks(&local)).scores[&3], 2);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    form: Form<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Form<'a> {
    Tokens {
        tokens: &'a [u32],
        salt: HashSalt,
    },
    Blocks(&'a [LocalBlockHash]),
    Sequence(&'a [SequenceHash]),
    Hashes {
        local: &'a [LocalBlockHash],
        seq: &'a [SequenceHash],
    },
    /// Both forms, the sequence hashes the chain of the local ones (as `PromptHashes`
    /// makes them).
    Chained {
        local: &'a [LocalBlockHash],
        seq: &'a [SequenceHash],
    },
}

impl<'a> Query<'a> {
    /// A prompt's tokens; its full blocks are hashed with no salt.
    #[inline]
    pub fn tokens(tokens: &'a [u32]) -> Self {
        Self::salted_tokens(tokens, HashSalt::NONE)
    }

    /// A prompt's tokens under a LoRA adapter or cache namespace: its blocks match only
    /// queries with the same [`HashSalt`].
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, HashSalt, Query};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let tenant = HashSalt::new(None, Some("tenant-a"));
    /// index.record(1, Query::salted_tokens(&[1, 2, 3, 4], tenant)).unwrap();
    /// assert_eq!(index.find(Query::salted_tokens(&[1, 2, 3, 4], tenant)).scores[&1], 2);
    /// assert!(index.find(Query::tokens(&[1, 2, 3, 4])).scores.is_empty());
    /// ```
    #[inline]
    pub fn salted_tokens(tokens: &'a [u32], salt: HashSalt) -> Self {
        Self {
            form: Form::Tokens { tokens, salt },
        }
    }

    /// A prompt's local block hashes, one per full block.
    #[inline]
    pub fn blocks(local: &'a [LocalBlockHash]) -> Self {
        Self {
            form: Form::Blocks(local),
        }
    }

    /// A prompt's sequence hashes, one per full block, from its first block: the cheapest
    /// find when a router hashes a prompt once for several indexes. A record cannot take
    /// them alone. A slice that starts later is not a prompt: a find of it may miss blocks
    /// the index holds (a stretch of blocks that the same workers hold is stored under its
    /// first and last blocks' keys only), so its answer is unspecified.
    #[inline]
    pub fn sequence(seq: &'a [SequenceHash]) -> Self {
        Self {
            form: Form::Sequence(seq),
        }
    }

    /// Both hash forms of a prompt. A record checks that they pair up
    /// ([`RecordError::LengthMismatch`]) and places the blocks by the chain of `local`
    /// (what finds look up): where `seq` is not that chain, it is recorded as if it were.
    /// A find reads `local` only.
    #[inline]
    pub fn hashes(local: &'a [LocalBlockHash], seq: &'a [SequenceHash]) -> Self {
        Self {
            form: Form::Hashes { local, seq },
        }
    }

    /// A prompt's hashes in both forms, as [`PromptHashes`] computed them: the cheapest
    /// find (it probes the sequence hashes) and the cheapest record (both forms stored as
    /// they are: they pair up by construction) of a prompt hashed once.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, PromptHashes, Query};
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let hashes = PromptHashes::new(&[1, 2, 3, 4, 5], 2); // two full blocks
    /// index.record(3, Query::prompt(&hashes)).unwrap();
    /// assert_eq!(index.find(Query::prompt(&hashes)).scores[&3], 2);
    /// ```
    #[inline]
    pub fn prompt(hashes: &'a PromptHashes) -> Self {
        Self {
            form: Form::Chained {
                local: hashes.local(),
                seq: hashes.seq(),
            },
        }
    }

    /// The most tokens the prompt can have: as given, or for the hash forms (which drop a
    /// partial last block) its blocks and a partial block of `block_size - 1` tokens.
    pub(crate) fn max_token_count(&self, block_size: u32) -> usize {
        let blocks = match self.form {
            Form::Tokens { tokens, .. } => return tokens.len(),
            Form::Blocks(local) | Form::Hashes { local, .. } | Form::Chained { local, .. } => {
                local.len()
            }
            Form::Sequence(seq) => seq.len(),
        };
        let block_size = block_size as usize;
        blocks
            .saturating_mul(block_size)
            .saturating_add(block_size.saturating_sub(1))
    }

    /// Runs `find` on the hashes a find walks; tokens are hashed into a buffer that the
    /// calling thread reuses.
    #[inline]
    pub(crate) fn with_find_hashes<R>(
        self,
        block_size: u32,
        find: impl FnOnce(HashedQuery<'_>) -> R,
    ) -> R {
        match self.form {
            Form::Tokens { tokens, salt } => with_seq_buffer(|seq| {
                hash::seq_hashes_into(tokens, block_size, salt, seq);
                find(HashedQuery::Seq(seq))
            }),
            Form::Blocks(local) | Form::Hashes { local, .. } => find(HashedQuery::Local(local)),
            Form::Sequence(seq) | Form::Chained { seq, .. } => find(HashedQuery::Seq(seq)),
        }
    }

    /// Runs `record` on the local and sequence hashes a record stores (equal lengths, the
    /// sequence hashes the chain of the local ones), or says why it cannot.
    #[inline]
    pub(crate) fn with_record_hashes<R>(
        self,
        block_size: u32,
        record: impl FnOnce(&[LocalBlockHash], &[SequenceHash]) -> R,
    ) -> Result<R, RecordError> {
        match self.form {
            Form::Tokens { tokens, salt } => {
                let (mut local, mut seq) = (Vec::new(), Vec::new());
                hash::prompt_hashes_into(tokens, block_size, salt, &mut local, &mut seq);
                Ok(record(&local, &seq))
            }
            Form::Blocks(local) => Ok(record(local, &hash::compute_seq_hashes(local))),
            Form::Sequence([]) => Ok(record(&[], &[])),
            Form::Sequence(_) => Err(RecordError::NoLocalHashes),
            Form::Hashes { local, seq } if local.len() != seq.len() => {
                Err(RecordError::LengthMismatch {
                    local: local.len(),
                    seq: seq.len(),
                })
            }
            Form::Hashes { local, seq } => Ok(match hash::rechain(local, seq) {
                None => record(local, seq),
                Some(chain) => record(local, &chain),
            }),
            Form::Chained { local, seq } => Ok(record(local, seq)),
        }
    }
}

/// A prompt's hashes, as [`Query::prompt`]: `begin_request(worker, &hashes)`.
impl<'a> From<&'a PromptHashes> for Query<'a> {
    fn from(hashes: &'a PromptHashes) -> Self {
        Self::prompt(hashes)
    }
}

/// A prompt's tokens, as [`Query::tokens`]: `begin_request(worker, &tokens)`.
impl<'a> From<&'a [u32]> for Query<'a> {
    fn from(tokens: &'a [u32]) -> Self {
        Self::tokens(tokens)
    }
}

/// A prompt's tokens, as [`Query::tokens`].
impl<'a> From<&'a Vec<u32>> for Query<'a> {
    fn from(tokens: &'a Vec<u32>) -> Self {
        Self::tokens(tokens)
    }
}

/// A prompt's tokens, as [`Query::tokens`].
impl<'a, const N: usize> From<&'a [u32; N]> for Query<'a> {
    fn from(tokens: &'a [u32; N]) -> Self {
        Self::tokens(tokens)
    }
}

/// Runs `f` on this thread's reused sequence-hash buffer, or on a fresh one when that is
/// in use (a sink that finds again from inside a find) or gone (the thread is ending).
fn with_seq_buffer<R>(f: impl FnOnce(&mut Vec<SequenceHash>) -> R) -> R {
    thread_local! {
        static SEQ: RefCell<Vec<SequenceHash>> = const { RefCell::new(Vec::new()) };
    }
    with_thread_buffer(&SEQ, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_hashes(q: Query<'_>) -> Result<(Vec<u64>, Vec<u64>), RecordError> {
        q.with_record_hashes(2, |l, s| {
            (
                l.iter().map(|h| h.0).collect(),
                s.iter().map(|h| h.0).collect(),
            )
        })
    }

    #[test]
    fn every_form_records_the_chain_of_its_local_hashes() {
        let tokens = [1, 2, 3, 4, 5];
        let local = crate::compute_block_hash_for_seq(&tokens, 2);
        let seq = crate::compute_seq_hashes(&local);
        let want = record_hashes(Query::tokens(&tokens)).unwrap();
        assert_eq!(want.0.len(), 2);
        assert_eq!(want.1, seq.iter().map(|h| h.0).collect::<Vec<_>>());
        assert_eq!(record_hashes(Query::blocks(&local)).unwrap(), want);
        assert_eq!(record_hashes(Query::hashes(&local, &seq)).unwrap(), want);
        let wrong = [SequenceHash(7), SequenceHash(8)];
        assert_eq!(record_hashes(Query::hashes(&local, &wrong)).unwrap(), want);
    }

    #[test]
    fn a_record_needs_local_hashes_that_pair_up() {
        let seq = [SequenceHash(1)];
        assert_eq!(
            record_hashes(Query::sequence(&seq)),
            Err(RecordError::NoLocalHashes)
        );
        assert_eq!(record_hashes(Query::sequence(&[])), Ok((vec![], vec![])));
        assert_eq!(
            record_hashes(Query::hashes(&[LocalBlockHash(1)], &[])),
            Err(RecordError::LengthMismatch { local: 1, seq: 0 })
        );
    }

    #[test]
    fn a_find_inside_a_find_hashes_into_a_buffer_of_its_own() {
        let outer = Query::tokens(&[1, 2, 3, 4]).with_find_hashes(2, |q| {
            let inner = Query::tokens(&[5, 6]).with_find_hashes(2, |q| match q {
                HashedQuery::Seq(seq) => seq.len(),
                HashedQuery::Local(_) => usize::MAX,
            });
            match q {
                HashedQuery::Seq(seq) => (seq.len(), inner),
                HashedQuery::Local(_) => (usize::MAX, inner),
            }
        });
        assert_eq!(outer, (2, 1));
    }
}
