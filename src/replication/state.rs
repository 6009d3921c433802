//! The sharing state of one index ([`Replication`]): numbering its own decisions, the
//! outbox they are queued in, the highest sequence number applied per origin, and the
//! counters (which applies tally on their thread first: `tally.rs`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::decision::{Action, Decision, ReplicaId};
use super::lag::LagHistogram;
use super::outbox::Outbox;
use super::supersede::{CapacityOf, Superseded};
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
    /// decisions from half its start time in nanoseconds, one number a decision, so within
    /// one run its numbers stay below half the time of its latest decision (fewer than one
    /// decision per 2 ns): a number more than 2^20 above half the latest time this replica
    /// saw from it is a restart's. A wall clock that stands still counts a jump of more
    /// than 2^20 numbers (decisions lost) as a restart.
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

/// An origin's highest sequence number applied and the latest time (wall-clock
/// nanoseconds) of its decisions applied (`None`: none yet), locked while one of its
/// decisions is applied.
type OriginSeq = parking_lot::Mutex<Option<(u64, u64)>>;

/// The first number of a replica built at wall-clock time `started` (ns): half of it, so
/// that numbers never wrap (2^63 of them stay free above), and a replica restarted with
/// its id goes on above its old numbers if it took fewer than one decision per 2 ns.
fn first_seq(started: u64) -> u64 {
    started / 2
}

/// Whether `seq`, from an origin whose latest decision applied here was taken at `latest`
/// (ns), is a restart's number (see `ReplicationStats::restarts`).
fn is_restart(seq: u64, latest: u64) -> bool {
    seq > first_seq(latest).saturating_add(1 << 20)
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
        let first_seq = first_seq(started);
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
    /// (see `ApproxKvIndexer::reshare_capacities`).
    pub(crate) fn reshare_capacities(&self) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        for ((at, origin), ((worker_id, dp_rank), capacity)) in self.order.capacity_stamps() {
            let action = Action::SetCapacity {
                worker_id,
                dp_rank,
                capacity,
            };
            // Another replica's change is shared as this replica's decision, so its stamp
            // (this id) may order it differently against one taken at the same reading:
            // the nanosecond before keeps it behind those.
            let at = if origin == self.origin {
                at
            } else {
                at.saturating_sub(1)
            };
            self.queue(outbox, Some(Duration::from_nanos(at)), action);
        }
    }

    /// Applies a local removal or capacity change (`apply`) in the order that other
    /// replicas' decisions about the worker are applied in (`supersede.rs`), sets again
    /// (`keep`) the capacities of removed keys changed after it, and hands it to the outbox,
    /// if decisions are shared. A change stamped before a later one of the key (this
    /// replica's wall clock behind another's) is superseded here as everywhere: not
    /// shared, and the later capacity is set again (`apply` may have set this one already,
    /// as a report's lesson does).
    pub(crate) fn take_keyed(
        &self,
        action: Action,
        apply: impl FnOnce(),
        mut keep: impl FnMut(CapacityOf),
    ) {
        let now = self.wall.now();
        let stamp = (nanos(now), self.origin);
        let Some(((), kept)) = self.order.apply_in_order(&action, stamp, stamp.0, apply) else {
            if let Action::SetCapacity {
                worker_id, dp_rank, ..
            } = action
            {
                let key = (worker_id, dp_rank);
                if let Some(capacity) = self.order.capacity(key) {
                    keep((key, capacity));
                }
            }
            return;
        };
        kept.into_iter().for_each(keep);
        if let Some(outbox) = &self.outbox {
            self.queue(outbox, Some(now), action);
        }
    }

    /// Forgets when `key`'s capacity changed (a restore set it).
    pub(crate) fn forget_capacity(&self, key: (u64, u32)) {
        self.order.forget_capacity(key);
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
                            let latest = match *last {
                                Some((seq, latest)) => {
                                    if is_restart(decision.seq, latest) {
                                        tally.restart();
                                    } else {
                                        tally.gaps(decision.seq - seq - 1);
                                    }
                                    latest.max(taken)
                                }
                                None => taken,
                            };
                            *last = Some((decision.seq, latest));
                            let now = self.wall.now();
                            let age = now.saturating_sub(decision.decided_at);
                            let stamp = (taken, decision.origin);
                            let applied = self.order.apply_in_order(
                                &decision.action,
                                stamp,
                                nanos(now),
                                || apply(at, &decision.action, age),
                            );
                            let outcome = match applied {
                                Some((outcome, kept)) => {
                                    // Capacities changed after a removal outlive it.
                                    for ((worker_id, dp_rank), capacity) in kept {
                                        let set = Action::SetCapacity {
                                            worker_id,
                                            dp_rank,
                                            capacity,
                                        };
                                        apply(at, &set, age);
                                    }
                                    outcome
                                }
                                None => {
                                    tally.superseded();
                                    Applied::Applied
                                }
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
