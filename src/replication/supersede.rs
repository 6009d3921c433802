//! [`Superseded`]: when each worker (and each key) was last removed, and each key's
//! capacity last set, by the wall clock of the replica that did it. Another replica's
//! decision about a worker, taken before its removal or before a newer capacity of the
//! key, arrives late: applied as if it had come in its time, it changes nothing, so it is
//! skipped. That way replicas that exchange decisions in any order converge on the same
//! workers and capacities.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rustc_hash::FxHashMap;

use super::decision::Action;
use crate::WorkerId;

/// How long a removal is remembered (wall-clock nanoseconds) once more than
/// [`KEPT`] are: decisions arrive seconds late at most, and a route taken a TTL before
/// is skipped as expired anyway.
const REMEMBERED: u64 = 600_000_000_000;
/// Removals kept before the ones older than [`REMEMBERED`] are forgotten.
const KEPT: usize = 4096;

/// The times that order other replicas' decisions about a worker (see the module).
#[derive(Default)]
pub(crate) struct Superseded {
    /// Whether anything was noted: until then, nothing is superseded (no lock taken).
    any: AtomicBool,
    times: parking_lot::RwLock<Times>,
}

#[derive(Default)]
struct Times {
    /// Each removed worker's latest removal (every rank).
    workers_removed: FxHashMap<WorkerId, u64>,
    /// Each removed key's latest removal (one rank).
    keys_removed: FxHashMap<(WorkerId, u32), u64>,
    /// Each key's latest capacity change.
    capacity_set: FxHashMap<(WorkerId, u32), u64>,
}

impl Superseded {
    /// Notes a removal or a capacity change taken at `at` (wall-clock nanoseconds), here or
    /// by another replica. Routes and drops are not noted.
    pub(crate) fn note(&self, action: &Action, at: u64) {
        let mut times = self.times.write();
        let times = &mut *times;
        match *action {
            Action::RemoveWorker { worker_id } => {
                later(times.workers_removed.entry(worker_id).or_default(), at);
                times.capacity_set.retain(|&(w, _), _| w != worker_id);
            }
            Action::RemoveKey { worker_id, dp_rank } => {
                later(
                    times.keys_removed.entry((worker_id, dp_rank)).or_default(),
                    at,
                );
                times.capacity_set.remove(&(worker_id, dp_rank));
            }
            Action::SetCapacity {
                worker_id, dp_rank, ..
            } => later(
                times.capacity_set.entry((worker_id, dp_rank)).or_default(),
                at,
            ),
            Action::Route { .. } | Action::DropOlder { .. } => return,
        }
        self.any.store(true, Relaxed);
        if times.workers_removed.len() + times.keys_removed.len() > KEPT {
            let since = at.saturating_sub(REMEMBERED);
            times.workers_removed.retain(|_, &mut t| t >= since);
            times.keys_removed.retain(|_, &mut t| t >= since);
        }
    }

    /// Each key whose capacity was changed here or by another replica (and not removed
    /// since), with the time of its latest change.
    pub(crate) fn capacity_times(&self) -> Vec<((WorkerId, u32), u64)> {
        let times = self.times.read();
        times.capacity_set.iter().map(|(&k, &t)| (k, t)).collect()
    }

    /// Whether `action`, taken at `at` by another replica, came before a removal of its
    /// worker, or (a capacity) before the key's latest capacity change, noted here.
    pub(crate) fn is_superseded(&self, action: &Action, at: u64) -> bool {
        if !self.any.load(Relaxed) {
            return false;
        }
        let (worker_id, dp_rank, capacity) = match *action {
            Action::Route {
                worker_id, dp_rank, ..
            }
            | Action::DropOlder {
                worker_id, dp_rank, ..
            } => (worker_id, dp_rank, false),
            Action::SetCapacity {
                worker_id, dp_rank, ..
            } => (worker_id, dp_rank, true),
            Action::RemoveWorker { .. } | Action::RemoveKey { .. } => return false,
        };
        let times = self.times.read();
        let after = |t: Option<&u64>| t.is_some_and(|&t| at < t);
        after(times.workers_removed.get(&worker_id))
            || after(times.keys_removed.get(&(worker_id, dp_rank)))
            || (capacity && after(times.capacity_set.get(&(worker_id, dp_rank))))
    }
}

/// Keeps the later of `time` and `at` in `time`.
fn later(time: &mut u64, at: u64) {
    *time = (*time).max(at);
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

    #[test]
    fn decisions_taken_before_a_removal_or_a_newer_capacity_are_superseded() {
        let s = Superseded::default();
        assert!(!s.is_superseded(&route(1, 0), 0));
        s.note(&Action::RemoveWorker { worker_id: 1 }, 100);
        assert!(s.is_superseded(&route(1, 3), 99), "every rank");
        assert!(
            !s.is_superseded(&route(1, 3), 100),
            "at the same instant: applied"
        );
        assert!(!s.is_superseded(&route(2, 0), 0), "another worker");
        assert!(!s.is_superseded(&Action::RemoveWorker { worker_id: 1 }, 0));
        s.note(
            &Action::RemoveKey {
                worker_id: 2,
                dp_rank: 1,
            },
            50,
        );
        assert!(s.is_superseded(&capacity(2, 1), 49));
        assert!(!s.is_superseded(&capacity(2, 0), 49), "another rank");
        s.note(&capacity(3, 0), 70);
        assert!(s.is_superseded(&capacity(3, 0), 69));
        assert!(!s.is_superseded(&capacity(3, 0), 70));
        assert!(
            !s.is_superseded(&route(3, 0), 0),
            "a capacity orders capacities only"
        );
        s.note(&capacity(3, 0), 60);
        assert!(
            s.is_superseded(&capacity(3, 0), 69),
            "the latest change counts"
        );
    }

    #[test]
    fn removals_are_forgotten_once_many_and_old() {
        let s = Superseded::default();
        for w in 0..KEPT as u64 {
            s.note(&Action::RemoveWorker { worker_id: w }, 1);
        }
        assert!(s.is_superseded(&route(0, 0), 0));
        s.note(
            &Action::RemoveWorker {
                worker_id: u64::MAX,
            },
            REMEMBERED + 2,
        );
        assert!(!s.is_superseded(&route(0, 0), 0), "forgotten");
        assert!(s.is_superseded(&route(u64::MAX, 0), REMEMBERED + 1));
    }
}
