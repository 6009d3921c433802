//! Request lifecycles: [`RequestHandle`] and the calls that begin, grow, report on and
//! finish a request ([`ApproxKvIndexer::begin_request`] and the rest).

use std::sync::{Arc, Weak};

use crate::core::{Begun, Core};
use crate::query::Query;
use crate::replication::Action;
use crate::stats::CacheReport;
use crate::{ApproxKvIndexer, LocalBlockHash, SequenceHash, WorkerId, WorkerKey};

/// A request running on a worker, from [`ApproxKvIndexer::begin_request`]: its blocks stay
/// pinned on that worker (never expired, never evicted by caps or capacities) until the
/// handle is given to [`finish_request`](ApproxKvIndexer::finish_request) or dropped.
///
/// Owned and `Send`: it borrows nothing from the index (it holds a weak reference to it),
/// so it can travel with the request to whichever thread sees it end. A handle outliving
/// its index releases nothing.
///
/// ```
/// use approx_kv_index::ApproxKvIndexer;
/// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
/// let prompt = [1, 2, 3, 4, 5];
/// let request = index.begin_request(3, &prompt);
/// assert_eq!(request.predicted_blocks(), 0); // nothing of it held before
/// assert_eq!(request.blocks(), 2);
/// let handle = std::thread::spawn(move || request).join().unwrap(); // Send
/// index.finish_request(handle);
/// ```
#[derive(Debug)]
pub struct RequestHandle<W: WorkerKey = WorkerId> {
    core: Weak<Core>,
    worker: W,
    /// What the begin did; `None` if it stored nothing (the handle is inert).
    begun: Option<Begun>,
    predicted: usize,
    max_prompt_tokens: usize,
    path: parking_lot::Mutex<RequestPath>,
}

/// The request's blocks (prompt, then output), and whether a cached count was reported.
#[derive(Debug, Default)]
struct RequestPath {
    local: Vec<LocalBlockHash>,
    seq: Vec<SequenceHash>,
    reported: bool,
}

impl<W: WorkerKey> RequestHandle<W> {
    /// How many leading blocks of the prompt the index believed the worker held just
    /// before this request was recorded: what the router predicted it would find cached.
    pub fn predicted_blocks(&self) -> usize {
        self.predicted
    }

    /// The worker the request runs on.
    pub fn worker(&self) -> W {
        self.worker
    }

    /// The request's pinned blocks: its prompt's full blocks, and its output's as
    /// [`request_output`](ApproxKvIndexer::request_output) adds them (0 for an inert
    /// handle, whose prompt had no local hashes or mismatched hash lengths).
    pub fn blocks(&self) -> usize {
        if self.begun.is_none() {
            return 0;
        }
        self.path.lock().seq.len()
    }

    /// The begin's record and this index's core, if the handle is this index's and
    /// stored something.
    fn own(&self, core: &Arc<Core>) -> Option<Begun> {
        (Weak::as_ptr(&self.core) == Arc::as_ptr(core))
            .then_some(self.begun)
            .flatten()
    }
}

impl<W: WorkerKey> Drop for RequestHandle<W> {
    fn drop(&mut self) {
        let (Some(begun), Some(core)) = (self.begun, self.core.upgrade()) else {
            return;
        };
        let path = self.path.get_mut();
        core.release(begun.slot, begun.generation, (&path.local, &path.seq));
    }
}

impl<W: WorkerKey> ApproxKvIndexer<W> {
    /// Begins a request of `prompt` on `worker`: records the routing decision (shared with
    /// other replicas as one: they hold the prompt's blocks for one TTL from the begin;
    /// the pins, the output and the release are this index's alone) and pins the prompt's full blocks on the worker until the
    /// returned handle is finished or dropped. `prompt` is a [`Query`] or a token slice.
    ///
    /// The handle's [`predicted_blocks`](RequestHandle::predicted_blocks) is the worker's
    /// found depth for the prompt just before this decision. A prompt without local
    /// hashes ([`Query::sequence`]) or with mismatched hash lengths records and pins
    /// nothing (its handle still predicts, and is inert otherwise). A prompt shorter than a
    /// block pins nothing yet but registers the worker: its handle is live, takes the
    /// output's blocks as they fill ([`request_output`](Self::request_output)) and a report.
    /// Pinned blocks count toward caps and capacities but are never evicted; when released they expire one TTL later and are
    /// evicted least recently released first, deepest first.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::new(1, std::time::Duration::from_secs(60)).unwrap();
    /// index.set_worker_capacity(7, Some(3));
    /// let running = index.begin_request(7, &[1, 2]); // older, but pinned
    /// index.record(7, Query::tokens(&[5])).unwrap();
    /// index.record(7, Query::tokens(&[6])).unwrap(); // over capacity: [5] goes
    /// assert_eq!(index.find(Query::tokens(&[1, 2])).scores[&7], 2);
    /// assert!(index.find(Query::tokens(&[5])).scores.is_empty());
    /// index.finish_request(running); // released now: the newest decision
    /// index.record(7, Query::tokens(&[8])).unwrap(); // [6] goes, the oldest
    /// assert!(index.find(Query::tokens(&[6])).scores.is_empty());
    /// assert_eq!(index.find(Query::tokens(&[1, 2])).scores[&7], 2);
    /// ```
    pub fn begin_request<'q>(&self, worker: W, prompt: impl Into<Query<'q>>) -> RequestHandle<W> {
        let query = prompt.into();
        let block_size = self.core.block_size;
        let begun = query.with_record_hashes(block_size, |local, seq| {
            let begun = self.core.begin_request(worker, (local, seq))?;
            self.share_route(worker, local);
            Some((begun, local.to_vec(), seq.to_vec()))
        });
        let (begun, path) = match begun {
            Ok(Some((begun, local, seq))) => (
                Some(begun),
                RequestPath {
                    local,
                    seq,
                    reported: false,
                },
            ),
            _ => (None, RequestPath::default()),
        };
        let predicted = match begun {
            Some(b) => b.predicted,
            None => query.with_find_hashes(block_size, |q| self.core.depth_of(worker, q)),
        };
        RequestHandle {
            core: Arc::downgrade(&self.core),
            worker,
            begun,
            predicted,
            max_prompt_tokens: query.max_token_count(block_size),
            path: parking_lot::Mutex::new(path),
        }
    }

    /// Adds a running request's output: `tokens` is its prompt and the output so far (the
    /// same form as the prompt given to [`begin_request`](Self::begin_request)); its full
    /// blocks past those the request holds join it, pinned. Returns how many joined: 0 if
    /// `tokens` does not start with the request's blocks, if the handle is another
    /// index's, or if its worker was removed.
    ///
    /// ```
    /// use approx_kv_index::ApproxKvIndexer;
    /// let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    /// let request = index.begin_request(1, &[1, 2, 3, 4]);
    /// assert_eq!(index.request_output(&request, &[1, 2, 3, 4, 5, 6, 7]), 1);
    /// assert_eq!(request.blocks(), 3);
    /// assert_eq!(index.request_output(&request, &[9, 9, 9, 9, 9, 9, 9, 9]), 0);
    /// ```
    pub fn request_output<'q>(
        &self,
        request: &RequestHandle<W>,
        tokens: impl Into<Query<'q>>,
    ) -> usize {
        let Some(begun) = request.own(&self.core) else {
            return 0;
        };
        let mut path = request.path.lock();
        tokens
            .into()
            .with_record_hashes(self.core.block_size, |local, seq| {
                let held = path.seq.len();
                if seq.len() <= held || seq[..held] != path.seq[..] {
                    return 0;
                }
                if !self
                    .core
                    .pin(begun.slot, begun.generation, (local, seq), held)
                {
                    return 0;
                }
                path.local = local.to_vec();
                path.seq = seq.to_vec();
                seq.len() - held
            })
            .unwrap_or(0)
    }

    /// Takes the engine's report of how many of the request's leading prompt tokens it
    /// found cached (vLLM's `num_cached_tokens`, the OpenAI usage field
    /// `prompt_tokens_details.cached_tokens`), once per request, while its handle lives.
    ///
    /// Its full blocks are compared with [`predicted_blocks`](RequestHandle::predicted_blocks)
    /// and summed per worker ([`cache_reports`](Self::cache_reports),
    /// [`IndexStats::cache`](crate::IndexStats::cache)). Fewer than predicted: the worker
    /// lost a block the index believed it held, and as an engine evicts least recently
    /// used blocks first, every claim of that worker made no later than its claim on the
    /// deepest predicted block (before this request) is dropped: decisions of the worker
    /// taken at the same clock reading as that claim too, unless the index was already
    /// logging decisions (with caps or a capacity set, or after a first loss of any
    /// worker), which orders a worker's decisions of one reading. The request's own blocks
    /// are pinned and never dropped. `docs/design.md` ("What engines report") states the
    /// rule. A loss also teaches the worker's capacity (a first value: what it held when
    /// the loss showed; an eighth lower after a loss well inside it; halfway down to the
    /// claims the loss rule kept, when those are most of what it held), and blocks its
    /// capacity evicted that the engine still delivers raise it, at least doubling it,
    /// together with every other worker's on the same capacity that no report taught
    /// (`docs/design.md`, "What reports teach of capacities").
    ///
    /// Returns whether the report was taken: not for a count beyond the prompt's tokens
    /// (for a request begun from hashes, whose partial last block they do not show: beyond
    /// its full blocks and `block_size - 1` tokens more), a second report, another index's
    /// handle, an inert handle (of a prompt without local hashes or with mismatched hash
    /// lengths), or one whose worker was removed.
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::new(1, std::time::Duration::from_secs(60)).unwrap();
    /// index.record(4, Query::tokens(&[7, 8])).unwrap(); // used first
    /// index.record(4, Query::tokens(&[1, 2, 3])).unwrap();
    /// let request = index.begin_request(4, &[1, 2, 3]);
    /// assert_eq!(request.predicted_blocks(), 3);
    /// assert!(index.observe_cached(&request, 1)); // only 1 of 3 blocks was still cached
    /// assert!(index.find(Query::tokens(&[7, 8])).scores.is_empty()); // older: gone too
    /// assert_eq!(index.find(Query::tokens(&[1, 2, 3])).scores[&4], 3); // its own stay
    /// assert_eq!(index.worker_capacity(4), Some(5)); // a first capacity: the 5 it held
    /// assert!(!index.observe_cached(&request, 1)); // once per request
    /// ```
    pub fn observe_cached(&self, request: &RequestHandle<W>, cached_tokens: usize) -> bool {
        let Some(begun) = request.own(&self.core) else {
            return false;
        };
        if cached_tokens > request.max_prompt_tokens {
            return false;
        }
        let mut path = request.path.lock();
        if path.reported {
            return false;
        }
        let delivered = cached_tokens / self.core.block_size as usize;
        let Some(reported) = self.core.report_cached(
            (begun.slot, begun.generation),
            (request.predicted, delivered),
            (begun.prior, begun.at),
            &path.seq,
        ) else {
            return false;
        };
        path.reported = true;
        self.share_report(request.worker, reported);
        true
    }

    /// Shares what a report changed: the claims a loss dropped, the capacity learned.
    fn share_report(&self, worker: W, reported: crate::core::Reported) {
        let (worker_id, dp_rank) = (worker.worker_id(), worker.dp_rank());
        if let Some(used_before) = reported.lost_used_before {
            self.replication.share(|| Action::DropOlder {
                worker_id,
                dp_rank,
                used_before: std::time::Duration::from_nanos(used_before),
            });
        }
        if let Some(capacity) = reported.learned {
            let raised = reported
                .peers_raised
                .iter()
                .map(|p| (p.worker_id, p.dp_rank));
            for (worker_id, dp_rank) in std::iter::once((worker_id, dp_rank)).chain(raised) {
                // Set already, by the report: noted and shared.
                let action = Action::SetCapacity {
                    worker_id,
                    dp_rank,
                    capacity: Some(capacity as u64),
                };
                self.replication
                    .take_keyed(action, || (), |kept| self.keep_capacity(kept));
            }
        }
    }

    /// Finishes a request: its blocks are released (as dropping the handle does). They
    /// stay cached on the worker, as a decision taken now: they expire one TTL from now,
    /// and caps and capacities evict them least recently released first, deepest first.
    /// Blocks another running request of the worker pins stay pinned. A handle of a
    /// removed worker releases nothing; a handle of another index is released in its own.
    pub fn finish_request(&self, request: RequestHandle<W>) {
        drop(request);
    }

    /// Each registered worker's reports of cached prompt tokens (see
    /// [`observe_cached`](Self::observe_cached)), in key order. A removed worker's go.
    pub fn cache_reports(&self) -> Vec<(W, CacheReport)> {
        self.core.cache_reports()
    }
}
