//! The sharing state of one index ([`Replication`]): numbering its own decisions, the
//! outbox they are queued in, the highest sequence number applied per origin, and the
//! counters (which applies tally on their thread first: `tally.rs`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::decision::{Action, Decision, ReplicaId};
use super::lag::LagHistogram;
use super::outbox::Outbox;
use super::supersede::Superseded;
use super::tally::Tally;
use crate::clock::{nanos, Clock};

/// What [`apply_decision`](crate::ApproxKvIndexer::apply_decision) did with a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied to the index.
    Applied,
    /// Not above the highest sequence number applied from its origin: already applied
    /// (or older than one that was).
    Duplicate,
    /// This replica's own decision (taken since this index was built).
    OwnOrigin,
    /// Taken a TTL or more ago: its entries would already have expired.
    Expired,
}

/// Counters of decision sharing, from [`ApproxKvIndexer::replication_stats`](crate::ApproxKvIndexer::replication_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicationStats {
    /// This replica's id.
    pub replica_id: ReplicaId,
    /// Local decisions handed to the outbox (queued or dropped), since creation.
    pub shared: u64,
    /// Of those, dropped because the outbox was full.
    pub dropped: u64,
    /// Decisions waiting in the outbox now.
    pub queued: usize,
    /// Other replicas' decisions applied.
    pub applied: u64,
    /// Decisions received again (or out of order) and skipped.
    pub duplicates: u64,
    /// Decisions received a TTL or more after they were taken, and skipped.
    pub expired: u64,
    /// Decisions of other replicas never received: numbers skipped in an origin's
    /// sequence (dropped by a full outbox there, or trimmed from a transport's retained
    /// window before this replica read them). A jump that only a restart explains is
    /// counted in `restarts` instead.
    pub gaps: u64,
    /// Other replicas seen starting again under the same id. An origin numbers its
    /// decisions from its start time in nanoseconds, so a restart jumps its numbers by
    /// about the time since its first start: a jump of more than 65,536 numbers, and of
    /// more than one number per 64 ns between the two decisions' times (no replica
    /// decides 15 million times a second), is a restart, not gaps.
    pub restarts: u64,
    /// Other replicas' decisions about a worker taken before it was removed, or capacities
    /// set before a newer one of the key, here or by any replica: applied as if they had
    /// arrived in their time, they change nothing, and are skipped (counted in `applied`).
    pub superseded: u64,
    /// Median time from a decision to its arrival here (wall clocks of both replicas), over
    /// the decisions applied (those skipped as duplicates, own or a TTL old do not count,
    /// nor capacity changes, which are shared again dated from the change: see
    /// [`reshare_capacities`](crate::ApproxKvIndexer::reshare_capacities)).
    pub lag_p50: Duration,
    /// 99th percentile of the same.
    pub lag_p99: Duration,
}

/// An origin's highest sequence number applied and that decision's time in wall-clock
/// nanoseconds (`None`: none yet), locked while one of its decisions is applied.
type OriginSeq = parking_lot::Mutex<Option<(u64, u64)>>;

/// The highest number a replica starts its decisions from: half the numbers stay free
/// above it, so they never wrap (a wall clock past 2262 starts here).
const LAST_FIRST_SEQ: u64 = u64::MAX >> 1;

/// Whether an origin's numbers jumping by `skipped + 1` between two of its decisions
/// taken `elapsed` nanoseconds apart show a restart (see `ReplicationStats::restarts`).
fn is_restart(skipped: u64, elapsed: u64) -> bool {
    skipped > (elapsed / 64).max(1 << 16)
}

/// The sharing state of one index.
pub(crate) struct Replication {
    origin: ReplicaId,
    wall: Arc<dyn Clock>,
    /// The next decision's number, locked while a decision is numbered and queued, so
    /// that decisions reach the outbox in the order of their numbers.
    next_seq: parking_lot::Mutex<u64>,
    /// The first sequence number of this incarnation: decisions of this origin numbered
    /// below it were taken before a restart, and are applied like anyone's.
    first_seq: u64,
    outbox: Option<Outbox>,
    shared: AtomicU64,
    /// Each origin's highest sequence number applied (`None` before its first), behind a
    /// lock of its own, held while applying: one origin's decisions are applied one at a
    /// time, in order, and different origins' at once. The map's lock is held only to find
    /// or add an origin's entry.
    applied_seq: parking_lot::Mutex<rustc_hash::FxHashMap<ReplicaId, Arc<OriginSeq>>>,
    pub(super) applied: AtomicU64,
    pub(super) duplicates: AtomicU64,
    pub(super) expired: AtomicU64,
    pub(super) gaps: AtomicU64,
    pub(super) restarts: AtomicU64,
    pub(super) superseded: AtomicU64,
    /// Removals and capacity changes, which order later-arriving decisions.
    pub(super) order: Superseded,
    pub(super) lag: LagHistogram,
}

impl Replication {
    /// The sharing state of an index with replica id `origin` (a random one if `None`),
    /// reading `wall` for the time decisions are taken, queueing its decisions in an
    /// outbox of `outbox` decisions if any.
    pub(crate) fn new(
        origin: Option<ReplicaId>,
        wall: Arc<dyn Clock>,
        outbox: Option<usize>,
    ) -> Self {
        let started = nanos(wall.now());
        // Numbered from the start time, so a restarted replica keeping its id goes on
        // above its old numbers (unless it took more than one decision a nanosecond).
        let first_seq = started.min(LAST_FIRST_SEQ);
        Self {
            origin: origin.unwrap_or_else(|| random_id(started)),
            wall,
            next_seq: parking_lot::Mutex::new(first_seq),
            first_seq,
            outbox: outbox.map(Outbox::new),
            shared: AtomicU64::new(0),
            applied_seq: Default::default(),
            applied: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            superseded: AtomicU64::new(0),
            order: Superseded::default(),
            lag: LagHistogram::default(),
        }
    }

    /// Hands a local route to the outbox, if decisions are shared.
    #[inline]
    pub(crate) fn share(&self, action: impl FnOnce() -> Action) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        self.queue(outbox, None, action());
    }

    /// Numbers `action` and queues it, dated `decided_at` (`None`: now). Numbered and
    /// queued under one lock: receivers skip a number below one they applied.
    fn queue(&self, outbox: &Outbox, decided_at: Option<Duration>, action: Action) {
        self.shared.fetch_add(1, Relaxed);
        let mut seq = self.next_seq.lock();
        outbox.push(Decision {
            origin: self.origin,
            seq: *seq,
            decided_at: decided_at.unwrap_or_else(|| self.wall.now()),
            action,
        });
        *seq = seq.saturating_add(1);
    }

    /// Shares every capacity this index knows a time of (set here or by another replica,
    /// the key not removed since) again, dated when it was changed: a transport that trims
    /// its stream to a window keeps them in it, so a replica that joins late learns them
    /// (see `ApproxKvIndexer::reshare_capacities`). `capacity_of` reads a key's capacity.
    pub(crate) fn reshare_capacities(&self, capacity_of: impl Fn(u64, u32) -> Option<u64>) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        for ((worker_id, dp_rank), at) in self.order.capacity_times() {
            let action = Action::SetCapacity {
                worker_id,
                dp_rank,
                capacity: capacity_of(worker_id, dp_rank),
            };
            self.queue(outbox, Some(Duration::from_nanos(at)), action);
        }
    }

    /// Notes a local removal or capacity change (it orders other replicas' decisions about
    /// the worker that arrive later: `supersede.rs`), and hands it to the outbox, if
    /// decisions are shared.
    pub(crate) fn share_keyed(&self, action: Action) {
        let now = self.wall.now();
        self.order.note(&action, nanos(now));
        if let Some(outbox) = &self.outbox {
            self.queue(outbox, Some(now), action);
        }
    }

    /// Applies other replicas' decisions once each, in order, through `apply` (given the
    /// decision's place in `decisions`, its action and its age by this index's wall
    /// clock), and reports each outcome to `out`: skips this replica's own and any not
    /// numbered above the highest applied from its origin (counting the numbers skipped as
    /// gaps), and counts the outcomes and lags. An origin's lock is held while `apply` runs
    /// for a stretch of its consecutive decisions, so one origin's decisions are applied
    /// one at a time, in order; other origins' are not held up. The counts reach the shared
    /// counters at the end ([`Tally`]).
    pub(crate) fn apply_each(
        &self,
        decisions: &[Decision],
        mut apply: impl FnMut(usize, &Action, Duration) -> Applied,
        mut out: impl FnMut(Applied),
    ) {
        let mut tally = Tally::default();
        let mut at = 0;
        for stretch in decisions.chunk_by(|a, b| a.origin == b.origin) {
            let foreign = stretch.iter().any(|d| !self.is_own(d));
            let origin = foreign.then(|| {
                Arc::clone(
                    self.applied_seq
                        .lock()
                        .entry(stretch[0].origin)
                        .or_default(),
                )
            });
            let mut last = origin.as_deref().map(parking_lot::Mutex::lock);
            for decision in stretch {
                let outcome = match last.as_deref_mut() {
                    Some(last) if !self.is_own(decision) => {
                        if last.is_some_and(|(seq, _)| decision.seq <= seq) {
                            tally.duplicate();
                            Applied::Duplicate
                        } else {
                            let taken = nanos(decision.decided_at);
                            if let Some((seq, then)) = *last {
                                let skipped = decision.seq - seq - 1;
                                if is_restart(skipped, taken.saturating_sub(then)) {
                                    tally.restart();
                                } else {
                                    tally.gaps(skipped);
                                }
                            }
                            *last = Some((decision.seq, taken));
                            let age = self.wall.now().saturating_sub(decision.decided_at);
                            let outcome = if self.order.is_superseded(&decision.action, taken) {
                                tally.superseded();
                                Applied::Applied
                            } else {
                                self.order.note(&decision.action, taken);
                                apply(at, &decision.action, age)
                            };
                            // Capacities are shared again, dated from their change.
                            let lagged = !matches!(decision.action, Action::SetCapacity { .. });
                            tally.outcome(outcome, lagged.then_some(age), self);
                            outcome
                        }
                    }
                    _ => Applied::OwnOrigin,
                };
                out(outcome);
                at += 1;
            }
        }
        tally.add_to(self);
    }

    /// Whether this replica took `decision` (since it was built): `apply` skips it.
    pub(crate) fn is_own(&self, decision: &Decision) -> bool {
        decision.origin == self.origin && decision.seq >= self.first_seq
    }

    /// The outbox, when decisions are shared.
    pub(crate) fn outbox(&self) -> Option<&Outbox> {
        self.outbox.as_ref()
    }

    pub(crate) fn stats(&self) -> ReplicationStats {
        ReplicationStats {
            replica_id: self.origin,
            shared: self.shared.load(Relaxed),
            dropped: self.outbox.as_ref().map_or(0, Outbox::dropped),
            queued: self.outbox.as_ref().map_or(0, Outbox::len),
            applied: self.applied.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            expired: self.expired.load(Relaxed),
            gaps: self.gaps.load(Relaxed),
            restarts: self.restarts.load(Relaxed),
            superseded: self.superseded.load(Relaxed),
            lag_p50: self.lag.quantile(0.5),
            lag_p99: self.lag.quantile(0.99),
        }
    }
}

/// A replica id nobody chose: the standard library's random hash keys over the time.
fn random_id(started: u64) -> ReplicaId {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((started, std::process::id()))
}
