//! [`Superseded`]: when each worker (and each key) was last removed, and each key's
//! capacity last changed, stamped with the deciding replica's wall clock and id. Another
//! replica's decision about a worker, taken before its removal or before a newer capacity
//! of the key, arrives late: applied as if it had come in its time, it changes nothing, so
//! it is skipped. That way replicas that exchange decisions in any order end with the same
//! workers and capacities.
//!
//! Decisions are ordered by their stamp, (wall-clock time, replica id): two replicas'
//! decisions taken at one reading are ordered by their ids, the same way everywhere. A
//! decision is checked and applied under one lock ([`Superseded::apply_in_order`]): read for
//! routes and drops, write for removals and capacity changes, so that a removal cannot
//! slip between an older route's check and its apply on another applying thread.

use rustc_hash::FxHashMap;

use super::decision::{Action, ReplicaId};
use crate::WorkerId;

/// When a decision was taken (wall-clock nanoseconds) and by which replica: decisions are
/// ordered by time, then id.
pub(crate) type Stamp = (u64, ReplicaId);

/// How long a removal is remembered (wall-clock nanoseconds, by this replica's clock) once
/// more than [`KEPT`] are: decisions arrive seconds late at most, and a route taken a TTL
/// before is skipped as expired anyway.
const REMEMBERED: u64 = 600_000_000_000;
/// Removals kept before the ones older than [`REMEMBERED`] are forgotten.
const KEPT: usize = 4096;

/// The stamps that order other replicas' decisions about a worker (see the module).
#[derive(Default)]
pub(crate) struct Superseded {
    stamps: parking_lot::RwLock<Stamps>,
}

#[derive(Default)]
struct Stamps {
    /// Each removed worker's latest removal (every rank).
    workers_removed: FxHashMap<WorkerId, Stamp>,
    /// Each removed key's latest removal (one rank).
    keys_removed: FxHashMap<(WorkerId, u32), Stamp>,
    /// Each key's latest capacity change, and the capacity it set.
    capacity_set: FxHashMap<(WorkerId, u32), (Stamp, Option<u64>)>,
    /// Removals remembered past which the old ones are forgotten (at least [`KEPT`]; twice
    /// the removals left after the last time, so that forgetting costs O(1) a removal).
    forget_above: usize,
}

impl Stamps {
    /// The latest removal of the key's worker or of the key itself.
    fn removed(&self, key: (WorkerId, u32)) -> Option<Stamp> {
        let worker = self.workers_removed.get(&key.0).copied();
        worker.max(self.keys_removed.get(&key).copied())
    }

    /// Whether `action`, stamped `stamp`, came before a removal of its worker or (a
    /// capacity) before the key's latest capacity change.
    fn supersede(&self, action: &Action, stamp: Stamp) -> bool {
        let Some((key, capacity)) = keyed(action) else {
            return false;
        };
        let before = |s: Option<Stamp>| s.is_some_and(|s| stamp < s);
        before(self.removed(key))
            || (capacity && before(self.capacity_set.get(&key).map(|&(s, _)| s)))
    }

    /// Notes a removal or a capacity change stamped `stamp`; `now` is this replica's wall
    /// clock, by which old removals are forgotten. Returns the capacities of the removed
    /// keys that were changed after the removal (elsewhere): they stay.
    fn note(&mut self, action: &Action, stamp: Stamp, now: u64) -> Vec<CapacityOf> {
        let kept = match *action {
            Action::RemoveWorker { worker_id } => {
                later(self.workers_removed.entry(worker_id).or_default(), stamp);
                self.remove_capacities(stamp, |(w, _)| w == worker_id)
            }
            Action::RemoveKey { worker_id, dp_rank } => {
                let key = (worker_id, dp_rank);
                later(self.keys_removed.entry(key).or_default(), stamp);
                self.remove_capacities(stamp, |k| k == key)
            }
            Action::SetCapacity {
                worker_id,
                dp_rank,
                capacity,
            } => {
                let set = self.capacity_set.entry((worker_id, dp_rank));
                let (s, value) = set.or_insert((stamp, capacity));
                if stamp >= *s {
                    (*s, *value) = (stamp, capacity);
                }
                return Vec::new();
            }
            Action::Route { .. } | Action::DropOlder { .. } => return Vec::new(),
        };
        let removals = self.workers_removed.len() + self.keys_removed.len();
        if removals > self.forget_above.max(KEPT) {
            let since = now.saturating_sub(REMEMBERED);
            self.workers_removed.retain(|_, &mut (t, _)| t >= since);
            self.keys_removed.retain(|_, &mut (t, _)| t >= since);
            self.forget_above = 2 * (self.workers_removed.len() + self.keys_removed.len());
        }
        kept
    }

    /// Forgets the capacity changes of the keys a removal stamped `stamp` takes (`removed`),
    /// but those changed after it: they stay, and are returned.
    fn remove_capacities(
        &mut self,
        stamp: Stamp,
        removed: impl Fn((WorkerId, u32)) -> bool,
    ) -> Vec<CapacityOf> {
        let mut kept = Vec::new();
        self.capacity_set.retain(|&key, &mut (s, capacity)| {
            let later = s > stamp;
            if later && removed(key) {
                kept.push((key, capacity));
            }
            later || !removed(key)
        });
        kept
    }
}

/// A key and its capacity.
pub(crate) type CapacityOf = ((WorkerId, u32), Option<u64>);

/// The key an action is about, and whether it is a capacity change (`None`: a removal,
/// which nothing supersedes).
fn keyed(action: &Action) -> Option<((WorkerId, u32), bool)> {
    match *action {
        Action::Route {
            worker_id, dp_rank, ..
        }
        | Action::DropOlder {
            worker_id, dp_rank, ..
        } => Some(((worker_id, dp_rank), false)),
        Action::SetCapacity {
            worker_id, dp_rank, ..
        } => Some(((worker_id, dp_rank), true)),
        Action::RemoveWorker { .. } | Action::RemoveKey { .. } => None,
    }
}

impl Superseded {
    /// Runs `apply` for `action`, stamped `stamp` (here or by another replica), unless an
    /// earlier removal or capacity change supersedes it (`None`), and notes a removal or a
    /// capacity change: checked, applied and noted under one lock. `now`: this replica's
    /// wall clock, in nanoseconds. A removal also returns the capacities of its keys
    /// changed after it (elsewhere, arriving first), which the caller sets again: they
    /// outlive the removal.
    pub(crate) fn apply_in_order<R>(
        &self,
        action: &Action,
        stamp: Stamp,
        now: u64,
        apply: impl FnOnce() -> R,
    ) -> Option<(R, Vec<CapacityOf>)> {
        if matches!(action, Action::Route { .. } | Action::DropOlder { .. }) {
            let stamps = self.stamps.read();
            return (!stamps.supersede(action, stamp)).then(|| (apply(), Vec::new()));
        }
        let mut stamps = self.stamps.write();
        if stamps.supersede(action, stamp) {
            return None;
        }
        let kept = stamps.note(action, stamp, now);
        Some((apply(), kept))
    }

    /// Each key whose capacity was changed here or by another replica (and not removed
    /// since), with the stamp of its latest change and the capacity it set.
    pub(crate) fn capacity_stamps(&self) -> Vec<(Stamp, CapacityOf)> {
        let stamps = self.stamps.read();
        let set = stamps.capacity_set.iter();
        set.map(|(&key, &(stamp, capacity))| (stamp, (key, capacity)))
            .collect()
    }

    /// The capacity the key's latest change set, if a change is known.
    pub(crate) fn capacity(&self, key: (WorkerId, u32)) -> Option<Option<u64>> {
        let stamps = self.stamps.read();
        stamps.capacity_set.get(&key).map(|&(_, capacity)| capacity)
    }

    /// Forgets when the key's capacity changed (a restore set it: the snapshot does not say
    /// when), so that it is not shared again.
    pub(crate) fn forget_capacity(&self, key: (WorkerId, u32)) {
        self.stamps.write().capacity_set.remove(&key);
    }
}

/// Keeps the later of `stamp` and `new` in `stamp`.
fn later(stamp: &mut Stamp, new: Stamp) {
    *stamp = (*stamp).max(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(worker_id: WorkerId, dp_rank: u32) -> Action {
        Action::Route {
            worker_id,
            dp_rank,
            blocks: vec![],
        }
    }

    fn capacity(worker_id: WorkerId, dp_rank: u32) -> Action {
        Action::SetCapacity {
            worker_id,
            dp_rank,
            capacity: Some(4),
        }
    }

    /// Whether `action` stamped `stamp` is applied (and noted).
    fn applies(s: &Superseded, action: &Action, stamp: Stamp) -> bool {
        s.apply_in_order(action, stamp, 0, || ()).is_some()
    }

    #[test]
    fn decisions_taken_before_a_removal_or_a_newer_capacity_are_superseded() {
        let s = Superseded::default();
        assert!(applies(&s, &route(1, 0), (0, 0)));
        assert!(applies(
            &s,
            &Action::RemoveWorker { worker_id: 1 },
            (100, 5)
        ));
        assert!(!applies(&s, &route(1, 3), (99, 9)), "every rank");
        assert!(!applies(&s, &route(1, 3), (100, 4)), "one reading: by id");
        assert!(applies(&s, &route(1, 3), (100, 6)));
        assert!(applies(&s, &route(2, 0), (0, 0)), "another worker");
        assert!(applies(&s, &Action::RemoveWorker { worker_id: 1 }, (0, 0)));
        assert!(applies(
            &s,
            &Action::RemoveKey {
                worker_id: 2,
                dp_rank: 1
            },
            (50, 0)
        ));
        assert!(!applies(&s, &capacity(2, 1), (49, 0)));
        assert!(applies(&s, &capacity(2, 0), (49, 0)), "another rank");
        assert!(applies(&s, &capacity(3, 0), (70, 0)));
        assert!(!applies(&s, &capacity(3, 0), (69, 0)));
        assert!(
            applies(&s, &capacity(3, 0), (70, 0)),
            "the same stamp: again"
        );
        assert!(
            applies(&s, &route(3, 0), (0, 0)),
            "a capacity orders capacities only"
        );
    }

    #[test]
    fn a_removal_keeps_the_stamp_of_a_later_capacity() {
        let s = Superseded::default();
        assert!(applies(&s, &capacity(5, 0), (300, 1)));
        let removal = Action::RemoveWorker { worker_id: 5 };
        let kept = s.apply_in_order(&removal, (100, 2), 0, || ()).unwrap().1;
        assert_eq!(kept, [((5, 0), Some(4))], "outlives the removal");
        assert!(
            !applies(&s, &capacity(5, 0), (200, 2)),
            "older than the 300"
        );
        assert_eq!(s.capacity_stamps(), [((300, 1), ((5, 0), Some(4)))]);
        assert!(applies(
            &s,
            &Action::RemoveKey {
                worker_id: 5,
                dp_rank: 0
            },
            (400, 2)
        ));
        assert!(s.capacity_stamps().is_empty());
    }

    /// A removal waits while an older route of its worker is being applied (with the lock
    /// released between the route's check and its apply, it slipped in: the route then
    /// brought the worker back).
    #[test]
    fn a_removal_waits_for_an_older_route_being_applied() {
        let s = Superseded::default();
        let (done, removed) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            s.apply_in_order(&route(1, 0), (1, 0), 0, || {
                let (s, done) = (&s, done.clone());
                scope.spawn(move || {
                    let removal = Action::RemoveWorker { worker_id: 1 };
                    s.apply_in_order(&removal, (2, 0), 0, || ());
                    done.send(()).unwrap();
                });
                let early = removed.recv_timeout(std::time::Duration::from_millis(100));
                assert!(
                    early.is_err(),
                    "the removal went on during the route's apply"
                );
            });
        });
        removed.recv().unwrap();
        assert!(!applies(&s, &route(1, 0), (1, 0)));
    }

    #[test]
    fn removals_are_forgotten_by_this_replicas_clock_once_many_and_old() {
        let s = Superseded::default();
        let remove = |w, at, now| {
            s.apply_in_order(&Action::RemoveWorker { worker_id: w }, (at, 0), now, || ())
        };
        for w in 0..KEPT as u64 {
            remove(w, 1, 1);
        }
        // Another replica's clock far ahead forgets nothing by itself; the next try waits
        // for twice the removals left.
        remove(u64::MAX, 2 * REMEMBERED, 2);
        assert!(!applies(&s, &route(0, 0), (0, 0)));
        assert_eq!(s.stamps.read().forget_above, 2 * (KEPT + 1));
        // Ten minutes on here: the old ones go, once that many are remembered.
        for w in 0..=KEPT as u64 + 1 {
            remove(1 << 32 | w, REMEMBERED + 2, REMEMBERED + 2);
        }
        assert!(applies(&s, &route(0, 0), (0, 0)), "forgotten");
        assert!(!applies(&s, &route(u64::MAX, 0), (REMEMBERED, 0)));
        assert!(!applies(&s, &route(1 << 32, 0), (REMEMBERED, 0)));
        assert_eq!(s.stamps.read().forget_above, 2 * (KEPT + 3));
    }
}
