//! The realistic cluster (`--cluster realistic`): perturbations of the simple one, each
//! of which can be turned on alone (`--perturbations`), and what the router knows of the
//! workers' capacities at start (`--capacity-start`).

use std::time::Duration;

use approx_kv_rng::{mix64, SplitMix64};
use clap::ValueEnum;

/// Mixed into the seed of the foreign router's choices and of the restart times.
const FOREIGN: u64 = 0xF0E1_67A1_0E55_0001;
const RESTART: u64 = 0x2E57_A127_0000_0001;

/// One way the realistic cluster departs from the simple one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Perturbation {
    /// Workers of two sizes: the odd ones have twice the blocks
    Sizes,
    /// Running requests' blocks pinned in the engine until they finish, then freed
    Pins,
    /// Each worker restarts once, unannounced, at a random time of the trace
    Restarts,
    /// A quarter of the requests routed (at random) by another router this index never sees
    Foreign,
}

impl Perturbation {
    /// Every perturbation: the realistic cluster's default.
    pub const ALL: [Perturbation; 4] = [
        Perturbation::Sizes,
        Perturbation::Pins,
        Perturbation::Restarts,
        Perturbation::Foreign,
    ];
}

/// The perturbations of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Realism {
    pub sizes: bool,
    pub pins: bool,
    pub restarts: bool,
    pub foreign: bool,
}

impl Realism {
    /// The perturbations named.
    pub fn of(list: &[Perturbation]) -> Self {
        let has = |p| list.contains(&p);
        Self {
            sizes: has(Perturbation::Sizes),
            pins: has(Perturbation::Pins),
            restarts: has(Perturbation::Restarts),
            foreign: has(Perturbation::Foreign),
        }
    }

    /// Each worker's cache, in blocks, around `base`.
    pub fn capacities(&self, workers: usize, base: usize) -> Vec<usize> {
        (0..workers)
            .map(|w| {
                if self.sizes && w % 2 == 1 {
                    2 * base
                } else {
                    base
                }
            })
            .collect()
    }

    /// When each worker restarts (trace ms), if it does: once, uniformly in `span`.
    pub fn restarts(
        &self,
        workers: usize,
        (from, to): (Duration, Duration),
        seed: u64,
    ) -> Vec<Option<u64>> {
        let (from, to) = (from.as_millis() as u64, to.as_millis() as u64);
        (0..workers)
            .map(|w| {
                let mut rng = SplitMix64::new(seed ^ RESTART ^ mix64(w as u64));
                self.restarts
                    .then(|| from + rng.below(to.saturating_sub(from).max(1)))
            })
            .collect()
    }

    /// The worker another router sends request `i` to, if another router routes it.
    pub fn foreign(&self, seed: u64, i: usize, workers: usize) -> Option<usize> {
        let draw = mix64(seed ^ FOREIGN ^ mix64(i as u64));
        (self.foreign && draw % 4 == 0).then(|| ((draw >> 8) % workers as u64) as usize)
    }
}

/// What the router knows of the capacities at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CapacityStart {
    /// Each worker's own
    True,
    /// None: the index runs on its TTL until reports teach it
    Unknown,
    /// One guess for all, a quarter of the mean
    Low4,
    /// One guess for all, four times the mean
    High4,
}

impl CapacityStart {
    /// The capacity set for each worker at start (`None`: none set).
    pub fn initial(self, capacities: &[usize]) -> Vec<Option<usize>> {
        let mean = capacities.iter().sum::<usize>() / capacities.len().max(1);
        capacities
            .iter()
            .map(|&c| match self {
                CapacityStart::True => Some(c),
                CapacityStart::Unknown => None,
                CapacityStart::Low4 => Some((mean / 4).max(1)),
                CapacityStart::High4 => Some(mean * 4),
            })
            .collect()
    }

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            CapacityStart::True => "true",
            CapacityStart::Unknown => "unknown",
            CapacityStart::Low4 => "low4",
            CapacityStart::High4 => "high4",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perturbations_do_what_they_say() {
        let all = Realism::of(&[
            Perturbation::Sizes,
            Perturbation::Pins,
            Perturbation::Restarts,
            Perturbation::Foreign,
        ]);
        assert_eq!(all.capacities(4, 10), [10, 20, 10, 20]);
        assert_eq!(Realism::default().capacities(2, 10), [10, 10]);
        let span = (Duration::from_secs(10), Duration::from_secs(20));
        let times = all.restarts(8, span, 1);
        assert!(times
            .iter()
            .all(|t| t.is_some_and(|t| (10_000..20_000).contains(&t))));
        assert!(Realism::default()
            .restarts(8, span, 1)
            .iter()
            .all(Option::is_none));
        let foreign = (0..4000)
            .filter(|&i| all.foreign(7, i, 8).is_some())
            .count();
        assert!((800..1200).contains(&foreign), "{foreign}: about a quarter");
        assert!(Realism::default().foreign(7, 0, 8).is_none());
        assert_eq!(CapacityStart::Low4.initial(&[10, 30]), [Some(5), Some(5)]);
        assert_eq!(CapacityStart::True.initial(&[10, 30]), [Some(10), Some(30)]);
        assert_eq!(CapacityStart::Unknown.initial(&[10]), [None]);
        assert_eq!(
            CapacityStart::High4.initial(&[10, 30]),
            [Some(80), Some(80)]
        );
    }
}
