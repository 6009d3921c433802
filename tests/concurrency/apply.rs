//! Applying other replicas' decisions from several threads at once: each origin's are
//! applied one at a time and in order, different origins' without waiting for each other,
//! and the result is the one of applying them on one thread.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use approx_kv_index::replication::{Action, Applied, Decision};
use approx_kv_index::{ApproxKvIndexer, Clock, LocalBlockHash, ManualClock};

use crate::support::index::sharing_replica;

const TTL: Duration = Duration::from_secs(3600);

const EPOCH: Duration = Duration::from_secs(1_700_000_000);

/// How long a test waits for something that should happen at once (a failure bound only).
const PATIENCE: Duration = Duration::from_secs(30);

/// A wall clock at `EPOCH` that, once armed, holds its next reader until released.
#[derive(Default)]
struct GateClock {
    /// Told when a reader is held, then waited on for its release.
    gate: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl GateClock {
    /// Arms the gate: returns (a receiver told when a reader is held, a sender releasing it).
    fn arm(&self) -> (Receiver<()>, Sender<()>) {
        let (held_tx, held_rx) = channel();
        let (release_tx, release_rx) = channel();
        *self.gate.lock().unwrap() = Some((held_tx, release_rx));
        (held_rx, release_tx)
    }
}

impl Clock for GateClock {
    fn now(&self) -> Duration {
        let gate = self.gate.lock().unwrap().take();
        if let Some((held, release)) = gate {
            let _ = held.send(());
            let _ = release.recv_timeout(PATIENCE);
        }
        EPOCH
    }
}

fn route(origin: u64, seq: u64, worker_id: u64, blocks: &[u64]) -> Decision {
    Decision {
        origin,
        seq,
        decided_at: EPOCH,
        action: Action::Route {
            worker_id,
            dp_rank: 0,
            blocks: blocks.iter().copied().map(LocalBlockHash).collect(),
        },
    }
}

#[test]
fn an_origin_being_applied_does_not_hold_up_another() {
    let wall = Arc::new(GateClock::default());
    let index = Arc::new(
        ApproxKvIndexer::builder()
            .block_size(1)
            .ttl(TTL)
            .replica_id(1)
            .wall_clock(wall.clone())
            .build()
            .unwrap(),
    );
    let (held, release) = wall.arm();
    // Origin 5's decision is held inside its apply (reading the wall clock, with its
    // origin's lock taken).
    let first = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.apply_decision(&route(5, 2, 7, &[1, 2, 3])))
    };
    held.recv_timeout(PATIENCE)
        .expect("origin 5's apply reads the clock");
    // Origin 6's goes through meanwhile; origin 5's older one waits for the first, then
    // is a duplicate.
    let (done_tx, done_rx) = channel();
    let second = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || {
            let outcome = index.apply_decision(&route(6, 1, 8, &[1, 2, 4]));
            let _ = done_tx.send(outcome);
        })
    };
    let older = {
        let index = Arc::clone(&index);
        std::thread::spawn(move || index.apply_decision(&route(5, 1, 9, &[1])))
    };
    let other = done_rx.recv_timeout(PATIENCE);
    let _ = release.send(()); // (gone if the held reader gave up waiting)
    assert_eq!(other, Ok(Applied::Applied), "origin 6 waited for origin 5");
    assert_eq!(first.join().unwrap(), Applied::Applied);
    second.join().unwrap();
    assert_eq!(older.join().unwrap(), Applied::Duplicate);
    let found = index.find_matches(&[1, 2, 3].map(LocalBlockHash));
    assert_eq!((found.scores[&7], found.scores[&8]), (3, 2));
    assert!(!found.scores.contains_key(&9));
    let stats = index.replication_stats();
    assert_eq!((stats.applied, stats.duplicates), (2, 1));
}

/// The decisions of `origins` replicas, each routing prompts that share prefixes with the
/// others' to workers of its own, now and then removing one of them.
fn decisions_of(origins: u64) -> Vec<Vec<Decision>> {
    let clock = Arc::new(ManualClock::new());
    clock.set(EPOCH);
    (0..origins)
        .map(|origin| {
            let replica = sharing_replica(100 + origin, &clock, TTL)
                .share_decisions(1 << 16)
                .build()
                .unwrap();
            for n in 0..400u32 {
                let worker = origin * 3 + u64::from(n % 3);
                // Prompts of 1-48 blocks under a few shared stems.
                let stem = (n * 7 + origin as u32) % 5;
                let len = 1 + (n * 13 + origin as u32 * 5) % 48;
                let tokens: Vec<u32> = (0..len).map(|t| stem * 1_000 + t * (1 + t % 3)).collect();
                replica.process_routing_decision_for_request(&tokens, worker);
                if n % 97 == 96 {
                    replica.remove_worker(worker);
                }
            }
            let outbox = replica.outbox().unwrap();
            std::iter::from_fn(|| outbox.pop()).collect()
        })
        .collect()
}

fn fresh() -> ApproxKvIndexer {
    let clock = Arc::new(ManualClock::new());
    clock.set(EPOCH);
    sharing_replica(1, &clock, TTL).build().unwrap()
}

#[test]
fn origins_applied_on_threads_of_their_own_end_as_applied_on_one() {
    let streams = decisions_of(4);
    let serial = fresh();
    for stream in &streams {
        for batch in stream.chunks(64) {
            assert!(serial
                .apply_decisions(batch)
                .iter()
                .all(|&a| a == Applied::Applied));
        }
    }
    for round in 0..3 {
        let parallel = fresh();
        std::thread::scope(|s| {
            for stream in &streams {
                let parallel = &parallel;
                s.spawn(move || {
                    // Alternating batches and single decisions.
                    for (k, batch) in stream.chunks(16 + round).enumerate() {
                        if k % 2 == 0 {
                            assert!(parallel
                                .apply_decisions(batch)
                                .iter()
                                .all(|&a| a == Applied::Applied));
                        } else {
                            for d in batch {
                                assert_eq!(parallel.apply_decision(d), Applied::Applied);
                            }
                        }
                    }
                });
            }
        });
        for worker in 0..12 {
            assert_eq!(
                parallel.worker_entries(worker),
                serial.worker_entries(worker),
                "worker {worker}'s entries, round {round}"
            );
        }
        for stream in &streams {
            for d in stream {
                if let Action::Route { blocks, .. } = &d.action {
                    assert_eq!(
                        parallel.find_matches(blocks).scores,
                        serial.find_matches(blocks).scores,
                        "round {round}"
                    );
                }
            }
        }
        let stats = parallel.replication_stats();
        let total: usize = streams.iter().map(Vec::len).sum();
        assert_eq!(
            (stats.applied, stats.duplicates, stats.gaps),
            (total as u64, 0, 0)
        );
    }
}
