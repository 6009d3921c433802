//! Router replicas: a run of an index policy as N replicas behind a load balancer, each
//! with its own index and its own view of in-flight load, sharing their decisions (or
//! not).
//!
//! - `none`: a replica knows only the requests it routed.
//! - `memory`: an in-process broadcast of the indexes' real [`Decision`]s (taken from
//!   each index's outbox, applied with `apply_decision`), each visible to the other
//!   replicas `delay` of trace time after it was taken; the in-flight load of a request
//!   travels with its decision.
//! - `redis`: the decisions go through a real Redis server (`RedisSync`, one per
//!   replica); after each request the replay waits until every replica applied every
//!   other's decision (trace time does not move meanwhile), and in-flight loads travel
//!   with no delay.

use std::sync::Arc;
use std::time::Duration;

use approx_kv_index::replication::Decision;
use approx_kv_index::{ApproxKvIndexer, Builder, ManualClock};
use parking_lot::{Mutex, RwLock};

/// How replicas share decisions.
#[derive(Debug, Clone, PartialEq)]
pub enum Sharing {
    /// Not at all.
    None,
    /// In process, visible `delay` (trace time) after each decision.
    Memory {
        /// Trace time from a decision to its arrival at the other replicas.
        delay: Duration,
    },
    /// Through the Redis server at this URL.
    Redis {
        /// `redis://HOST:PORT` or `rediss://HOST:PORT`.
        url: String,
        /// PEM file of the root certificate(s) a `rediss://` server is verified against.
        tls_ca: Option<std::path::PathBuf>,
    },
}

/// The replicas of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Router replicas (1: a single router).
    pub replicas: usize,
    /// How they share decisions.
    pub sharing: Sharing,
}

impl Fleet {
    /// One router, as without replicas.
    pub const SINGLE: Fleet = Fleet {
        replicas: 1,
        sharing: Sharing::None,
    };

    /// `""`, `", 8 replicas"`, `", 8 replicas synced (memory, 10 ms)"`, `"... (redis)"`.
    pub fn suffix(&self) -> String {
        match (&self.sharing, self.replicas) {
            (_, 1) => String::new(),
            (Sharing::None, n) => format!(", {n} replicas"),
            (Sharing::Memory { delay }, n) => {
                format!(", {n} replicas synced (memory, {} ms)", delay.as_millis())
            }
            (Sharing::Redis { .. }, n) => format!(", {n} replicas synced (redis)"),
        }
    }
}

/// One decision on its way to the other replicas.
struct InFlight {
    visible_ms: u64,
    origin: usize,
    worker: usize,
    end_ms: u64,
    /// The decision itself (memory sharing; Redis carries its own).
    decision: Option<Decision>,
}

/// What one replica knows.
struct View {
    /// Position in the broadcast log up to which this replica has applied.
    cursor: usize,
    /// End times of the requests it knows to be running, per worker.
    running: Vec<Vec<u64>>,
}

/// The replicas of a run, their indexes and what they know.
pub struct Replicas {
    indexes: Vec<Arc<ApproxKvIndexer>>,
    views: Vec<Mutex<View>>,
    log: RwLock<Vec<InFlight>>,
    fleet: Fleet,
    #[cfg(feature = "redis")]
    redis: Option<crate::redis_sync::Synced>,
}

impl Replicas {
    /// `fleet.replicas` indexes built from `builder` (replica ids 0, 1, ...), for
    /// `workers` workers; `tag` names this run's Redis stream. Decisions are dated by
    /// `clock` (trace time) in memory, by the real wall clock through Redis (so the lag
    /// it reports is real).
    pub fn new(
        builder: &Builder,
        clock: &Arc<ManualClock>,
        fleet: &Fleet,
        workers: usize,
        tag: &str,
    ) -> Result<Self, String> {
        let indexes = (0..fleet.replicas)
            .map(|id| {
                let b = builder.clone().replica_id(id as u64);
                let b = match fleet.sharing {
                    Sharing::None => b,
                    Sharing::Memory { .. } => b.share_decisions(1 << 20).wall_clock(clock.clone()),
                    Sharing::Redis { .. } => b.share_decisions(1 << 20),
                };
                b.build()
                    .map(Arc::new)
                    .map_err(|e| format!("cannot build the index: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let views = (0..fleet.replicas)
            .map(|_| {
                Mutex::new(View {
                    cursor: 0,
                    running: vec![Vec::new(); workers],
                })
            })
            .collect();
        #[cfg(feature = "redis")]
        let redis = match &fleet.sharing {
            Sharing::Redis { url, tls_ca } => Some(crate::redis_sync::start(
                &indexes,
                url,
                tls_ca.as_deref(),
                tag,
            )?),
            _ => None,
        };
        #[cfg(not(feature = "redis"))]
        if let Sharing::Redis { .. } = fleet.sharing {
            let _ = tag;
            return Err(
                "--sync redis://...: this build has no Redis support; build with \
                        `--features redis`"
                    .into(),
            );
        }
        Ok(Self {
            indexes,
            views,
            log: RwLock::new(Vec::new()),
            fleet: fleet.clone(),
            #[cfg(feature = "redis")]
            redis,
        })
    }

    /// How many replicas.
    pub fn len(&self) -> usize {
        self.indexes.len()
    }

    /// The replica's index.
    pub fn index(&self, replica: usize) -> &ApproxKvIndexer {
        &self.indexes[replica]
    }

    /// Every replica's index.
    pub fn all(&self) -> impl Iterator<Item = &ApproxKvIndexer> {
        self.indexes.iter().map(|i| &**i)
    }

    /// Brings `replica` up to `now_ms` (applies what reached it), then writes its view of
    /// each worker's in-flight requests into `out`.
    pub fn loads(&self, replica: usize, now_ms: u64, out: &mut Vec<u32>) {
        let mut view = self.views[replica].lock();
        let log = self.log.read();
        while let Some(d) = log.get(view.cursor).filter(|d| d.visible_ms <= now_ms) {
            if d.origin != replica {
                view.running[d.worker].push(d.end_ms);
                if let Some(decision) = &d.decision {
                    self.indexes[replica].apply_decision(decision);
                }
            }
            view.cursor += 1;
        }
        out.clear();
        for running in &mut view.running {
            running.retain(|&end| end > now_ms);
            out.push(running.len() as u32);
        }
    }

    /// `replica` routed a request to `worker` at `now_ms`, running until `end_ms`: it
    /// knows, and (when sharing) the others will.
    pub fn routed(&self, replica: usize, worker: usize, now_ms: u64, end_ms: u64) {
        self.views[replica].lock().running[worker].push(end_ms);
        let delay = match &self.fleet.sharing {
            Sharing::None => return,
            Sharing::Memory { delay } => delay.as_millis() as u64,
            Sharing::Redis { .. } => 0,
        };
        // In memory, the decision this route just queued; Redis's publisher takes its own.
        let decision = match self.fleet.sharing {
            Sharing::Memory { .. } => self.indexes[replica].outbox().and_then(|o| o.pop()),
            _ => None,
        };
        self.log.write().push(InFlight {
            visible_ms: now_ms.saturating_add(delay),
            origin: replica,
            worker,
            end_ms,
            decision,
        });
        #[cfg(feature = "redis")]
        if self.redis.is_some() {
            crate::redis_sync::wait_applied(&self.indexes, Duration::from_secs(10));
        }
    }

    /// A line on the sharing, for synced runs through Redis.
    pub fn note(&self) -> Option<String> {
        #[cfg(feature = "redis")]
        return self.redis.as_ref().map(crate::redis_sync::note);
        #[cfg(not(feature = "redis"))]
        None
    }
}
