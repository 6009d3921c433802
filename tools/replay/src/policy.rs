//! Routing policies and the one balance rule that approx and oracle share.

use std::time::Duration;

use approx_kv_index::Builder;

use approx_kv_rng::{mix64, SplitMix64};

use crate::fleet::Fleet;
use crate::realism::CapacityStart;

/// Which router a run uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// This crate's index, entries live for `ttl`.
    Approx {
        /// Entry lifetime.
        ttl: Duration,
        /// The router replicas.
        fleet: Fleet,
    },
    /// This crate's index, bounded to each worker's cache capacity (an LRU mirror).
    ApproxCapacity {
        /// Entry lifetime (`Duration::MAX`: the capacity bound does all the work).
        ttl: Duration,
        /// Blocks per worker, the simulated cache size.
        blocks: usize,
        /// The router replicas.
        fleet: Fleet,
    },
    /// This crate's index, told each request's life and what the engine found cached.
    Requests {
        /// Which calls the router makes.
        calls: Calls,
        /// What it knows of capacities at start.
        start: CapacityStart,
        /// The router replicas.
        fleet: Fleet,
    },
    /// This crate's index fed only the engines' KV events (`--events`): no decisions.
    EventsOnly {
        /// The router replicas.
        fleet: Fleet,
    },
    /// An exact copy of each engine's cache fed only this router's requests: what exact
    /// knowledge of this router's own requests, and of nothing else, gives.
    Bound,
    /// Exact knowledge of the simulated caches.
    Oracle,
    /// Request `i` goes to worker `i mod W`.
    RoundRobin,
    /// A uniformly random worker (seeded).
    Random,
}

impl Policy {
    /// Short name for tables and plots.
    pub fn name(&self) -> String {
        match self {
            Policy::Approx { ttl, fleet } => {
                format!("approx ttl={}{}", fmt_ttl(*ttl), fleet.suffix())
            }
            Policy::ApproxCapacity { fleet, .. } => format!("approx-capacity{}", fleet.suffix()),
            Policy::Requests {
                calls,
                start,
                fleet,
            } => {
                let start = match start {
                    CapacityStart::True => String::new(),
                    other => format!(" start={}", other.name()),
                };
                format!("{}{start}{}", calls.name(), fleet.suffix())
            }
            Policy::EventsOnly { fleet } => format!("events-only{}", fleet.suffix()),
            Policy::Bound => "bound".into(),
            Policy::Oracle => "oracle".into(),
            Policy::RoundRobin => "round-robin".into(),
            Policy::Random => "random".into(),
        }
    }

    /// Whether the run calls the index (and so has router timings).
    pub fn uses_index(&self) -> bool {
        self.fleet().is_some()
    }

    /// The router replicas of an index policy.
    pub fn fleet(&self) -> Option<&Fleet> {
        match self {
            Policy::Approx { fleet, .. }
            | Policy::ApproxCapacity { fleet, .. }
            | Policy::Requests { fleet, .. }
            | Policy::EventsOnly { fleet } => Some(fleet),
            _ => None,
        }
    }

    /// Whether the run predicts each request's hit (an index, or the bound's caches).
    pub fn predicts(&self) -> bool {
        self.uses_index() || *self == Policy::Bound
    }

    /// Whether the run's index is fed the engines' KV events.
    pub fn uses_events(&self) -> bool {
        match self {
            Policy::EventsOnly { .. } => true,
            Policy::Requests { calls, .. } => calls.events,
            _ => false,
        }
    }
}

/// The calls a request-aware router makes beside `find`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    /// `begin_request` at the decision, `finish_request` when the request ends (else a
    /// request is finished as soon as it is begun: a plain decision).
    pub lease: bool,
    /// `observe_cached` with what the engine found cached.
    pub feedback: bool,
    /// The engines' KV events applied as they arrive (`--events`).
    pub events: bool,
}

impl Calls {
    /// The row's name.
    pub fn name(self) -> &'static str {
        match (self.lease, self.feedback, self.events) {
            (true, true, true) => "approx-hybrid",
            (true, true, false) => "approx-learning",
            (true, false, _) => "approx-lease",
            (false, true, _) => "approx-feedback",
            (false, false, _) => "approx-requests",
        }
    }

    /// The TTL of its index: none when capacities are known from the start (they bound
    /// it), ten minutes while they are unknown (until the first loss teaches one; a
    /// longer TTL keeps more for that first value, which the loss rule corrects).
    pub fn ttl(start: CapacityStart) -> Duration {
        match start {
            CapacityStart::Unknown => Duration::from_secs(600),
            _ => Duration::MAX,
        }
    }
}

/// `90s`, `2m`, `30m`, `1.5h`: a TTL in its natural unit.
pub fn fmt_ttl(d: Duration) -> String {
    let s = d.as_secs_f64();
    let (v, unit) = if s < 120.0 {
        (s, "s")
    } else if s < 7200.0 {
        (s / 60.0, "m")
    } else {
        (s / 3600.0, "h")
    };
    if (v - v.round()).abs() < 1e-9 {
        format!("{}{unit}", v.round())
    } else {
        format!("{v:.1}{unit}")
    }
}

/// The `approx-capacity` index: each worker capped at the simulated cache size, so the
/// index evicts a worker's least recently recorded blocks as its LRU would (it cannot see
/// decode blocks, so it keeps slightly more than the cache does).
pub fn with_capacity(builder: Builder, blocks: usize) -> Builder {
    builder.max_blocks_per_worker(blocks)
}

/// The balance rule, the same for approx and oracle:
/// candidates are the workers with `load <= min load + threshold`; among them the one
/// with the highest `overlap_weight * overlap - load` wins; ties go to the lower load,
/// then to the first worker at or after `rotate` (cyclically), so idle ties spread.
#[derive(Debug, Clone, Copy)]
pub struct Balance {
    /// Load slack, in outstanding requests.
    pub threshold: u32,
    /// Value of one overlap block against one outstanding request.
    pub overlap_weight: f64,
}

impl Balance {
    /// The worker to route to, given each worker's load and overlap (in blocks).
    pub fn choose(&self, loads: &[u32], overlap: impl Fn(usize) -> u32, rotate: usize) -> usize {
        let n = loads.len();
        let min = loads.iter().copied().min().unwrap_or(0);
        let limit = min.saturating_add(self.threshold);
        let mut best: Option<(f64, u32, usize)> = None;
        for k in 0..n {
            let w = (rotate + k) % n;
            let load = loads[w];
            if load > limit {
                continue;
            }
            let score = self.overlap_weight * f64::from(overlap(w)) - f64::from(load);
            let better = match best {
                None => true,
                Some((s, l, _)) => score > s || (score == s && load < l),
            };
            if better {
                best = Some((score, load, w));
            }
        }
        best.map_or(0, |(_, _, w)| w)
    }
}

/// The worker the random policy picks for request `i`: a pure function of the seed and
/// `i`, so runs with several threads pick the same workers.
pub fn random_worker(seed: u64, i: usize, workers: usize) -> usize {
    SplitMix64::new(seed ^ mix64(i as u64)).below(workers as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_prefers_overlap_within_the_slack() {
        let b = Balance {
            threshold: 2,
            overlap_weight: 1.0,
        };
        let overlaps = [0, 50, 90, 10];
        // Worker 2 has the most overlap but is 3 requests above the least loaded.
        let w = b.choose(&[1, 3, 4, 1], |w| overlaps[w], 0);
        assert_eq!(w, 1);
        // All idle, no overlap: the rotation spreads requests.
        assert_eq!(b.choose(&[0, 0, 0, 0], |_| 0, 3), 3);
        assert_eq!(b.choose(&[0, 0, 0, 0], |_| 0, 5), 1);
        // Equal scores: the lower load wins.
        assert_eq!(b.choose(&[2, 1, 0, 0], |w| [3, 2, 0, 0][w], 0), 1);
    }

    #[test]
    fn names() {
        assert_eq!(
            Policy::Approx {
                ttl: Duration::from_secs(60),
                fleet: Fleet::SINGLE,
            }
            .name(),
            "approx ttl=60s"
        );
        let fleet = Fleet {
            replicas: 8,
            sharing: crate::fleet::Sharing::Memory {
                delay: Duration::from_millis(10),
            },
        };
        let synced = Policy::ApproxCapacity {
            ttl: Duration::MAX,
            blocks: 1,
            fleet,
        };
        assert_eq!(
            synced.name(),
            "approx-capacity, 8 replicas synced (memory, 10 ms)"
        );
        assert_eq!(fmt_ttl(Duration::from_secs(1800)), "30m");
        assert_eq!(fmt_ttl(Duration::from_secs(90)), "90s");
        assert_eq!(fmt_ttl(Duration::from_secs(9000)), "2.5h");
        assert!(random_worker(1, 2, 8) < 8);
    }
}
