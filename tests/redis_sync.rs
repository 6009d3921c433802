//! Replicas sharing decisions through a real `redis-server` (started per test on a free
//! loopback port, killed at the end): `cargo test --features redis --test redis_sync`.
//! Without `redis-server` these skip, unless `APPROX_KV_REQUIRE_REDIS=1`.
//!
//! Waits are for other threads and a server: each polls for an outcome with a generous
//! deadline (30 s), never sleeping a fixed time to let something happen.
#![cfg(feature = "redis")]

#[path = "support/redis_server/mod.rs"]
mod redis_server;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use approx_kv_index::replication::redis::{RedisConfig, RedisSync, RedisSyncError, Retention};
use approx_kv_index::replication::{Action, Decision};
use approx_kv_index::{ApproxKvIndexer, LocalBlockHash};
use redis_server::{eventually, holds, prompt, sharing_index, RedisServer, DEADLINE};

fn replica(server: &RedisServer, id: u64, stream: &str) -> RedisSync {
    let config = RedisConfig::new(server.url()).stream(stream);
    RedisSync::start(sharing_index(id), config).unwrap()
}

#[test]
fn three_replicas_see_each_others_decisions() {
    let Some(server) = RedisServer::start(&["--requirepass", "s3cret"]) else {
        return;
    };
    let replicas: Vec<RedisSync> = (0..3).map(|id| replica(&server, id, "three")).collect();
    const EACH: u32 = 200;
    for n in 0..EACH {
        for (id, r) in replicas.iter().enumerate() {
            // Each replica routes its prompts to a worker named after itself.
            r.index()
                .process_routing_decision_for_request(&prompt(id as u64, n), id as u64);
        }
    }
    for r in &replicas {
        assert!(
            // Counters move after the work they count (a batch is counted once the server
            // answered, after a peer may have applied it): wait for them too.
            eventually(|| (0..3).all(|id| (0..EACH).all(|n| holds(r, id, n)))
                && (r.stats().published, r.stats().applied)
                    == (u64::from(EACH), 2 * u64::from(EACH))),
            "{:?}",
            r.stats()
        );
        let s = r.stats();
        assert_eq!(
            (s.published, s.applied),
            (u64::from(EACH), 2 * u64::from(EACH))
        );
        assert_eq!((s.rejected, s.dropped, s.gaps, s.expired), (0, 0, 0, 0));
        assert!(s.lag_p99 < DEADLINE, "{s:?}");
        eprintln!("replica lag: p50 {:?}, p99 {:?}", s.lag_p50, s.lag_p99);
    }
    for r in &replicas {
        r.shutdown(); // joins both threads
        r.shutdown(); // idempotent
    }
}

#[test]
fn any_batch_size_works() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let start = |id: u64, batch: usize| {
        let mut config = RedisConfig::new(server.url()).stream("batches");
        config.batch = batch;
        RedisSync::start(sharing_index(id), config).unwrap()
    };
    exchange(&start(1, 1), &start(2, usize::MAX), 50);
}

/// Replicas 1 and 2 each route `n` prompts to a worker named after themselves; each must
/// come to hold the other's, having applied exactly those.
fn exchange(one: &RedisSync, two: &RedisSync, n: u32) {
    for k in 0..n {
        one.index()
            .process_routing_decision_for_request(&prompt(1, k), 1);
        two.index()
            .process_routing_decision_for_request(&prompt(2, k), 2);
    }
    for (r, other) in [(one, 2), (two, 1)] {
        assert!(
            eventually(|| (0..n).all(|k| holds(r, other, k)) && r.stats().applied == u64::from(n)),
            "{:?}",
            r.stats()
        );
    }
}

#[test]
fn the_longest_durations_neither_panic_nor_stall() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let start = |id: u64| {
        let mut config = RedisConfig::new(server.url()).stream("durations");
        config.read_block = Duration::MAX;
        config.connect_timeout = Duration::MAX;
        config.backoff_min = Duration::MAX;
        config.backoff_max = Duration::MAX;
        config.retention = Some(Retention::Window(Duration::MAX));
        RedisSync::start(sharing_index(id), config).unwrap()
    };
    let (a, b) = (start(1), start(2));
    exchange(&a, &b, 20);
    // A blocked XREAD ends when its server goes; the threads then pause "forever" after
    // the failure, until the stop wakes them: shutdown joins them.
    drop(server);
    let started = Instant::now();
    a.shutdown();
    b.shutdown();
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
}

#[test]
fn a_late_joiner_reads_the_retained_window() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let early = replica(&server, 1, "late");
    for n in 0..100 {
        early
            .index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(eventually(|| early.stats().published == 100));
    let late = replica(&server, 2, "late");
    // The applied count moves after the blocks appear: wait for both.
    assert!(eventually(
        || (0..100).all(|n| holds(&late, 1, n)) && late.stats().applied == 100
    ));
}

/// src/indexer/replicas.rs, `reshare_capacities`: capacities never expire, and `RedisSync` shares
/// them again every half window, so a replica that joins after the stream trimmed the
/// capacity's first decision still learns it (it did not, found by an audit).
#[test]
fn a_late_joiner_learns_capacities_changed_before_the_window() {
    // Nodes of one entry, so that trimming takes exactly the entries older than the window.
    let Some(server) = RedisServer::start(&["--stream-node-max-entries", "1"]) else {
        return;
    };
    let index = |id| {
        let index = ApproxKvIndexer::builder()
            .block_size(4)
            .ttl(Duration::from_secs(2)) // the window: reshared every second
            .replica_id(id)
            .share_decisions(1024);
        Arc::new(index.build().unwrap())
    };
    let config = || RedisConfig::new(server.url()).stream("late-capacity");
    let early = RedisSync::start(index(1), config()).unwrap();
    early.index().set_worker_capacity(5, Some(4));
    early.index().set_worker_capacity(6, None);
    assert!(eventually(|| early.stats().published >= 2));
    let mut conn = server.connection();
    let first_id = |conn: &mut redis::Connection| -> Option<String> {
        type Entry = (String, Vec<(String, Vec<u8>)>);
        let range: Vec<Entry> = redis::cmd("XRANGE")
            .arg("late-capacity")
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query(conn)
            .unwrap();
        range.into_iter().next().map(|(id, _)| id)
    };
    let original = first_id(&mut conn).unwrap();
    // Decisions go on (publishing trims) until the capacities' own entries are gone.
    let mut n = 0;
    assert!(eventually(|| {
        n += 1;
        early
            .index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
        first_id(&mut conn).is_some_and(|id| id != original)
    }));
    let late = RedisSync::start(index(2), config()).unwrap();
    assert!(eventually(|| late.index().worker_capacity(5) == Some(4)));
    assert_eq!(late.index().worker_capacity(6), None);
}

#[test]
fn killing_and_restarting_the_server_blocks_no_call_and_replicas_catch_up() {
    let Some(mut server) = RedisServer::start(&[]) else {
        return;
    };
    let (a, b) = (
        replica(&server, 1, "restart"),
        replica(&server, 2, "restart"),
    );
    let running = AtomicBool::new(true);
    let slowest = AtomicU64::new(0);
    let recorded = AtomicU64::new(0);
    std::thread::scope(|s| {
        for r in [&a, &b] {
            let (running, slowest, recorded) = (&running, &slowest, &recorded);
            s.spawn(move || {
                // Fewer decisions than the outboxes hold (65,536), so none is dropped and
                // the markers below are queued however long the server is down.
                let mut n = 1_000_000;
                while running.load(Ordering::Relaxed) && n < 1_025_000 {
                    let start = Instant::now();
                    let id = r.stats().published; // any number: a changing prompt
                    let tokens = prompt(9, (n + id as u32) % 4096);
                    r.index().process_routing_decision_for_request(&tokens, 9);
                    let _ = r.index().find_matches_for_request(&tokens);
                    let took = start.elapsed().as_micros() as u64;
                    slowest.fetch_max(took, Ordering::Relaxed);
                    recorded.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    std::thread::sleep(Duration::from_micros(20)); // spreading the calls out
                }
            });
        }
        a.index()
            .process_routing_decision_for_request(&prompt(1, 0), 1);
        assert!(eventually(|| holds(&b, 1, 0)));
        server.kill();
        // Recorded while the server is down: queued in a's outbox.
        a.index()
            .process_routing_decision_for_request(&prompt(1, 1), 1);
        assert!(eventually(
            || a.stats().reconnects > 0 && b.stats().reconnects > 0
        ));
        server.restart();
        a.index()
            .process_routing_decision_for_request(&prompt(1, 2), 1);
        assert!(
            eventually(|| holds(&b, 1, 1) && holds(&b, 1, 2)),
            "{:?}",
            b.stats()
        );
        running.store(false, Ordering::Relaxed);
    });
    assert_eq!(a.stats().dropped + b.stats().dropped, 0);
    let slowest = Duration::from_micros(slowest.load(Ordering::Relaxed));
    eprintln!(
        "{} calls while killing and restarting, slowest {slowest:?}",
        recorded.load(Ordering::Relaxed)
    );
    // No call waits on the network: a generous bound, far below a connect timeout
    // (1 s) times the retries it would take.
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");
}

#[test]
fn garbage_on_the_stream_is_skipped_and_counted() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let b = replica(&server, 2, "garbage");
    let mut conn = server.connection();
    let valid = |seq| Decision {
        origin: 1,
        seq,
        decided_at: approx_kv_index::Clock::now(&approx_kv_index::UnixClock),
        action: Action::Route {
            worker_id: 5,
            dp_rank: 0,
            blocks: vec![LocalBlockHash(1), LocalBlockHash(2)],
        },
    };
    let mut wrong_version = valid(1).encode();
    wrong_version[4] = 99;
    let mut flipped = valid(2).encode();
    flipped[30] ^= 4;
    let oversized = vec![7u8; 600_000];
    let entries: [(&str, &[u8]); 5] = [
        ("d", b"garbage"),
        ("other", b"field"),
        ("d", &wrong_version),
        ("d", &flipped),
        ("d", &oversized),
    ];
    for (field, value) in entries {
        redis::cmd("XADD")
            .arg("garbage")
            .arg("*")
            .arg(field)
            .arg(value)
            .query::<String>(&mut conn)
            .unwrap();
    }
    let good = valid(3).encode();
    redis::cmd("XADD")
        .arg("garbage")
        .arg("*")
        .arg("d")
        .arg(good)
        .query::<String>(&mut conn)
        .unwrap();
    assert!(eventually(|| b.stats().applied == 1));
    assert_eq!(b.stats().rejected, 5);
    assert_eq!(b.index().stats().entries, 2); // the valid decision's blocks only
}

#[test]
fn trimming_bounds_the_stream() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let mut conn = server.connection();
    let xlen = |conn: &mut redis::Connection, key: &str| -> usize {
        redis::cmd("XLEN").arg(key).query(conn).unwrap()
    };
    // By length (capacity-only mode): about 100 entries ("~" trims whole nodes of 100).
    let index = Arc::new(
        ApproxKvIndexer::builder()
            .block_size(4)
            .ttl(Duration::MAX)
            .replica_id(1)
            .share_decisions(65_536)
            .build()
            .unwrap(),
    );
    let config = RedisConfig::new(server.url())
        .stream("bylen")
        .retention(Retention::MaxLen(100));
    let sync = RedisSync::start(index, config).unwrap();
    for n in 0..2_000 {
        sync.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(eventually(|| sync.stats().published == 2_000));
    assert!(
        xlen(&mut conn, "bylen") <= 200,
        "{}",
        xlen(&mut conn, "bylen")
    );

    // By time: 150 entries from 1970 are older than any window; adding trims the full
    // node of 100 of them (and "~" may keep the rest, in the node with the new entries).
    for i in 1..=150 {
        redis::cmd("XADD")
            .arg("bytime")
            .arg(format!("1-{i}"))
            .arg("x")
            .arg("old")
            .query::<String>(&mut conn)
            .unwrap();
    }
    let config = RedisConfig::new(server.url())
        .stream("bytime")
        .retention(Retention::Window(Duration::from_secs(60)));
    let index = ApproxKvIndexer::builder()
        .block_size(4)
        .replica_id(3)
        .share_decisions(64);
    let sync = RedisSync::start(Arc::new(index.build().unwrap()), config).unwrap();
    sync.index()
        .process_routing_decision_for_request(&prompt(3, 0), 1);
    assert!(eventually(|| sync.stats().published == 1));
    assert!(
        xlen(&mut conn, "bytime") <= 51,
        "{}",
        xlen(&mut conn, "bytime")
    );
}

#[test]
fn delete_stream_empties_the_stream_and_says_when_the_server_is_down() {
    let Some(mut server) = RedisServer::start(&[]) else {
        return;
    };
    let config = RedisConfig::new(server.url()).stream("deleted");
    let sync = RedisSync::start(sharing_index(1), config.clone()).unwrap();
    for n in 0..10 {
        sync.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(eventually(|| sync.stats().published == 10));
    sync.shutdown();
    let exists = |conn: &mut redis::Connection| -> bool {
        redis::cmd("EXISTS").arg("deleted").query(conn).unwrap()
    };
    assert!(exists(&mut server.connection()));
    config.delete_stream().unwrap();
    assert!(!exists(&mut server.connection()));
    config.delete_stream().unwrap(); // nothing left to delete: still fine
    server.kill();
    let down = config.delete_stream().unwrap_err();
    assert!(matches!(down, RedisSyncError::Server(_)), "{down}");
    assert!(down.to_string().starts_with("Redis server: "), "{down}");
}

#[test]
fn with_the_server_down_recording_goes_on_and_memory_stays_bounded() {
    let Some(mut server) = RedisServer::start(&[]) else {
        return;
    };
    let url = server.url();
    server.kill();
    let index = ApproxKvIndexer::builder()
        .block_size(4)
        .replica_id(1)
        .share_decisions(100)
        .build()
        .unwrap();
    let sync = RedisSync::start(Arc::new(index), RedisConfig::new(url).stream("down")).unwrap();
    for n in 0..1_000 {
        sync.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!((0..1_000).all(|n| holds(&sync, 1, n)));
    let s = sync.index().replication_stats();
    assert!(s.queued <= 100 && s.dropped >= 1_000 - 100 - 512, "{s:?}");
    assert!(eventually(|| sync.stats().reconnects > 0));
    let start = Instant::now();
    drop(sync); // joins both threads, though connecting fails
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// This process's threads named `name` (Linux), to see apply threads come and go.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |tasks| {
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == name)
            .count()
    })
}

#[test]
fn several_apply_threads_keep_each_origins_order() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let before = threads_named("approx-kv-apply");
    // Four replicas, three apply threads each: origins 0 and 3 share a thread, 1 and 2
    // have one of their own.
    let replicas: Vec<RedisSync> = (0..4)
        .map(|id| {
            let config = RedisConfig::new(server.url())
                .stream("appliers")
                .apply_threads(3);
            RedisSync::start(sharing_index(id), config).unwrap()
        })
        .collect();
    // (A thread names itself once it runs.)
    assert!(eventually(
        || threads_named("approx-kv-apply") == before + 4 * 2
    ));
    // Each replica routes its prompts to a worker named after itself, removes that worker
    // halfway, then routes the rest: applied out of order, a removal would take later
    // prompts too, or come before earlier ones and leave them (and an origin's decisions
    // applied out of order are skipped as duplicates and counted as gaps).
    const EACH: u32 = 120;
    const REMOVED_AFTER: u32 = EACH / 2;
    for n in 0..EACH {
        for (id, r) in replicas.iter().enumerate() {
            let id = id as u64;
            r.index()
                .process_routing_decision_for_request(&prompt(id, n), id);
            if n == REMOVED_AFTER {
                r.index().remove_worker(id);
            }
        }
    }
    let each = u64::from(EACH) + 1; // and the removal
    for r in &replicas {
        assert!(
            eventually(|| r.stats().applied == 3 * each),
            "{:?}",
            r.stats()
        );
        for id in 0..4 {
            for n in 0..EACH {
                assert_eq!(
                    holds(r, id, n),
                    n > REMOVED_AFTER,
                    "worker {id}, prompt {n}"
                );
            }
        }
        let s = r.stats();
        assert_eq!(
            (s.published, s.applied, s.gaps, s.rejected),
            (each, 3 * each, 0, 0)
        );
    }
    for r in &replicas {
        r.shutdown();
    }
    // (A joined thread's task may linger in /proc for a moment.)
    assert!(
        eventually(|| threads_named("approx-kv-apply") == before),
        "apply threads joined"
    );
}

#[test]
fn apply_threads_out_of_range_are_config_errors() {
    for threads in [
        0,
        approx_kv_index::replication::redis::MAX_APPLY_THREADS + 1,
    ] {
        let config = RedisConfig::new("redis://127.0.0.1:1").apply_threads(threads);
        let err = RedisSync::start(sharing_index(1), config).unwrap_err();
        assert!(matches!(err, RedisSyncError::Config(_)), "{threads}: {err}");
        assert!(err.to_string().contains("apply_threads"), "{err}");
    }
}
