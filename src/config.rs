//! Building an index: the [`Builder`] and its validated settings.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock, UnixClock};
use crate::error::ConfigError;

/// Default block size in tokens.
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
/// Default time an entry stays "probably cached" after its last recording: 120 s.
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);
/// Default sweeper tick: 100 ms.
pub const DEFAULT_TICK: Duration = Duration::from_millis(100);

/// Settings for an [`ApproxKvIndexer`](crate::ApproxKvIndexer).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | [`block_size`](Builder::block_size) | 16 | tokens per KV block (0 is an error) |
/// | [`ttl`](Builder::ttl) | 120 s | how long a recorded block stays "probably cached" (zero is an error) |
/// | [`tick`](Builder::tick) | 100 ms | how often the sweeper reclaims expired entries (zero is an error) |
/// | [`clock`](Builder::clock) | [`SystemClock`] | the time source |
/// | [`background_sweeper`](Builder::background_sweeper) | `true` | run the sweeper thread |
/// | [`max_blocks_per_worker`](Builder::max_blocks_per_worker) | none | cap on each worker's stored blocks (its KV cache size) |
/// | [`max_entries`](Builder::max_entries) | none | cap on all stored (block, worker) entries |
/// | [`replica_id`](Builder::replica_id) | random | this router replica's id among those sharing decisions |
/// | [`share_decisions`](Builder::share_decisions) | off | queue local decisions for other replicas (outbox capacity) |
/// | [`wall_clock`](Builder::wall_clock) | [`UnixClock`] | dates shared decisions |
///
/// ```
/// use std::time::Duration;
/// use approx_kv_index::{ApproxKvIndexer, ConfigError};
/// let index = ApproxKvIndexer::builder()
///     .block_size(64)
///     .ttl(Duration::from_secs(600))
///     .tick(Duration::from_millis(10))
///     .build()?;
/// assert_eq!(index.block_size(), 64);
/// assert_eq!(ApproxKvIndexer::builder().block_size(0).build().err(), Some(ConfigError::ZeroBlockSize));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Builder {
    pub(crate) block_size: u32,
    pub(crate) ttl: Duration,
    pub(crate) tick: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) background_sweeper: bool,
    pub(crate) max_blocks_per_worker: Option<usize>,
    pub(crate) max_entries: Option<usize>,
    pub(crate) replica_id: Option<u64>,
    pub(crate) share_decisions: Option<usize>,
    pub(crate) wall_clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("block_size", &self.block_size)
            .field("ttl", &self.ttl)
            .field("tick", &self.tick)
            .field("background_sweeper", &self.background_sweeper)
            .field("max_blocks_per_worker", &self.max_blocks_per_worker)
            .field("max_entries", &self.max_entries)
            .field("replica_id", &self.replica_id)
            .field("share_decisions", &self.share_decisions)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            block_size: DEFAULT_BLOCK_SIZE,
            ttl: DEFAULT_TTL,
            tick: DEFAULT_TICK,
            clock: Arc::new(SystemClock::new()),
            background_sweeper: true,
            max_blocks_per_worker: None,
            max_entries: None,
            replica_id: None,
            share_decisions: None,
            wall_clock: Arc::new(UnixClock),
        }
    }
}

impl Builder {
    /// Tokens per KV block; must match the engines' block (page) size.
    pub fn block_size(mut self, tokens: u32) -> Self {
        self.block_size = tokens;
        self
    }

    /// How long a recorded block stays "probably cached" after its last recording.
    ///
    /// A TTL of 2^62 ns (about 146 years) or more, `Duration::MAX` included, means
    /// **never**: approximate entries never expire (whatever the clock reads), no timers
    /// are kept, and only caps, `Removed` events and `remove_worker` take entries away
    /// (capacity-only mode, with [`max_blocks_per_worker`](Self::max_blocks_per_worker)).
    /// Shorter TTLs are real TTLs; an expiry past the end of the clock's range is its last
    /// instant (2^64 - 2 ns, see [`Clock`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the sweeper reclaims the memory of expired entries. Reads never wait
    /// for it: an expired entry reads as absent at once. A tick longer than the TTL is
    /// allowed; it only delays reclamation.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// The time source (e.g. a shared [`ManualClock`](crate::ManualClock) for tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Whether to run the background sweeper thread (default `true`). Without it, memory
    /// is reclaimed only by calls to
    /// [`ApproxKvIndexer::sweep_expired`](crate::ApproxKvIndexer::sweep_expired).
    pub fn background_sweeper(mut self, run: bool) -> Self {
        self.background_sweeper = run;
        self
    }

    /// Caps each worker at `blocks` stored blocks: set it to the worker's KV cache size in
    /// blocks and the index mirrors the engine's LRU instead of guessing with a TTL. Over
    /// the cap, the worker's least recently recorded decisions are evicted, deepest blocks
    /// first, so a surviving block never loses its prefix.
    ///
    /// Exact entries (stored by [`apply_event`](crate::ApproxKvIndexer::apply_event)) count
    /// toward the cap and push out the worker's least recently recorded *approximate*
    /// decisions; they are never evicted themselves (the engine says it holds them), so a
    /// worker whose engine reports more blocks than the cap holds exactly those. Restored
    /// and replayed entries count too, and are evicted in their original order.
    ///
    /// **Capacity-only mode** is this with [`ttl`](Self::ttl)`(Duration::MAX)` (a TTL of
    /// about 146 years or more is treated as "never", and no timers are kept):
    ///
    /// ```
    /// use std::time::Duration;
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::builder()
    ///     .block_size(1)
    ///     .ttl(Duration::MAX)
    ///     .max_blocks_per_worker(4)
    ///     .build()?;
    /// index.record(0, Query::tokens(&[1, 2, 3])).unwrap();
    /// index.record(0, Query::tokens(&[7, 8])).unwrap(); // 5 blocks: over the cap
    /// assert_eq!(index.find(Query::tokens(&[1, 2, 3])).scores[&0], 2); // deepest went first
    /// assert_eq!(index.stats().entries, 4);
    /// # Ok::<(), approx_kv_index::ConfigError>(())
    /// ```
    pub fn max_blocks_per_worker(mut self, blocks: usize) -> Self {
        self.max_blocks_per_worker = Some(blocks);
        self
    }

    /// Caps all stored (block, worker) entries together. Over the cap, the least recently
    /// recorded decisions of the whole index go first (whatever worker made them; an
    /// index-wide log keeps them in order, so the cost does not grow with the number of
    /// workers), deepest blocks first. Exact entries count toward the cap and are never
    /// evicted, as with [`max_blocks_per_worker`](Self::max_blocks_per_worker). With several
    /// threads recording, a recorder may evict its own fresh decision (another thread's
    /// eviction, a removal or a sweep racing it): read your writes, which the per-worker
    /// cap keeps, does not hold under this one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::builder().block_size(1).max_entries(2).build()?;
    /// for worker in 0..100 {
    ///     index.record(worker, Query::tokens(&[worker as u32])).unwrap();
    /// }
    /// assert_eq!(index.stats().entries, 2); // the two newest decisions
    /// assert_eq!(index.find(Query::tokens(&[99])).scores[&99], 1);
    /// # Ok::<(), approx_kv_index::ConfigError>(())
    /// ```
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.max_entries = Some(entries);
        self
    }

    /// This router replica's id among replicas sharing decisions (see
    /// [`replication`](crate::replication)); by default a random one. Decisions this index
    /// takes itself carry it, and decisions from this id numbered from its creation on are
    /// skipped as its own; earlier ones (a replica restarted with its id) are applied. Give
    /// every live replica its own id: two sharing one would skip each other's decisions.
    pub fn replica_id(mut self, id: u64) -> Self {
        self.replica_id = Some(id);
        self
    }

    /// Shares this replica's decisions: every local routing decision and worker removal
    /// is also queued, without waiting, as a [`Decision`](crate::replication::Decision) in
    /// an [`Outbox`](crate::replication::Outbox) of `capacity` decisions, for a transport
    /// to publish. When the outbox is full the decision is dropped (and counted); the
    /// local index has it all the same. Its memory follows what is queued: nothing is
    /// allocated up front, so any capacity is valid (0 counts as 1).
    ///
    /// ```
    /// use approx_kv_index::{ApproxKvIndexer, Query};
    /// let index = ApproxKvIndexer::builder().share_decisions(4096).build()?;
    /// index.record(1, Query::tokens(&[0; 32])).unwrap();
    /// assert_eq!(index.outbox().unwrap().len(), 1);
    /// # Ok::<(), approx_kv_index::ConfigError>(())
    /// ```
    pub fn share_decisions(mut self, capacity: usize) -> Self {
        self.share_decisions = Some(capacity);
        self
    }

    /// The wall clock (time since the Unix epoch) that dates shared decisions and ages
    /// received ones; [`UnixClock`] by default, a [`ManualClock`](crate::ManualClock) in
    /// tests. Replicas' wall clocks should agree (NTP): a decision dated in the receiver's
    /// future counts as taken now.
    pub fn wall_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.wall_clock = clock;
        self
    }

    /// Checks the settings an index cannot start with.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.block_size == 0 {
            return Err(ConfigError::ZeroBlockSize);
        }
        if self.tick.is_zero() {
            return Err(ConfigError::ZeroTick);
        }
        if self.ttl.is_zero() {
            return Err(ConfigError::ZeroTtl);
        }
        if self.max_blocks_per_worker == Some(0) || self.max_entries == Some(0) {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(())
    }
}
