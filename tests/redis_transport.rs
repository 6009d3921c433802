//! The Redis Streams transport's documented behaviour (the rustdoc of `replication::redis`
//! and docs/design.md "Sharing decisions between replicas"), each test quoting the sentence
//! it checks: `start`'s errors, the config's defaults and retention, resuming after a killed
//! connection, trimmed and TTL-old decisions, streams kept apart, stopping and shutting
//! down. Against a real `redis-server` started per test (`tests/support/redis_server`):
//! `cargo test --features redis --test redis_transport`. Without `redis-server` the server
//! tests skip, unless `APPROX_KV_REQUIRE_REDIS=1`.
//!
//! Waits are for other threads and a server: each polls for an outcome with a generous
//! deadline (30 s), never sleeping a fixed time to let something happen.
#![cfg(feature = "redis")]

#[path = "support/redis_server/mod.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use approx_kv_index::replication::redis::{RedisConfig, RedisSync, RedisSyncError, Retention};
use approx_kv_index::replication::{Action, Decision};
use approx_kv_index::{ApproxKvIndexer, Clock, LocalBlockHash, UnixClock};
use redis_server::{eventually, holds, prompt, sharing_index, RedisServer};

fn replica(server: &RedisServer, id: u64, stream: &str) -> RedisSync {
    RedisSync::start(
        sharing_index(id),
        RedisConfig::new(server.url()).stream(stream),
    )
    .unwrap()
}

/// A route of `origin` to worker 5 of one block named after `seq`, dated `decided_at`.
fn route(origin: u64, seq: u64, decided_at: Duration) -> Decision {
    Decision {
        origin,
        seq,
        decided_at,
        action: Action::Route {
            worker_id: 5,
            dp_rank: 0,
            blocks: vec![LocalBlockHash(seq)],
        },
    }
}

/// Whether `sync`'s index finds the block of `route(_, seq, _)` on worker 5.
fn holds_route(sync: &RedisSync, seq: u64) -> bool {
    let found = sync.index().find_matches(&[LocalBlockHash(seq)]);
    found.scores.get(&5) == Some(&1)
}

/// Adds `decision` to `stream` as a transport would (field `d`).
fn xadd(conn: &mut redis::Connection, stream: &str, decision: &Decision) {
    redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg("d")
        .arg(decision.encode())
        .query::<String>(conn)
        .unwrap();
}

fn xlen(conn: &mut redis::Connection, stream: &str) -> usize {
    redis::cmd("XLEN").arg(stream).query(conn).unwrap()
}

/// Clients connected to the server, the caller's own connection included.
fn clients(conn: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

/// src/replication/redis/mod.rs, `RedisSync::start`: "Errors: a URL the `redis` crate does
/// not take, a zero `batch`"; `RedisSyncError::Config`: "A setting is zero where it must
/// not be (`batch`)."; `RedisSyncError::Url`: "The URL is not one the `redis` crate takes."
#[test]
fn start_rejects_a_zero_batch_and_a_url_the_redis_crate_does_not_take() {
    let mut zero = RedisConfig::new("redis://127.0.0.1:6379");
    zero.batch = 0;
    let err = RedisSync::start(sharing_index(1), zero).unwrap_err();
    assert!(matches!(err, RedisSyncError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("batch"), "{err}");
    let mut instant = RedisConfig::new("redis://127.0.0.1:6379");
    instant.connect_timeout = Duration::ZERO;
    let err = RedisSync::start(sharing_index(1), instant).unwrap_err();
    assert!(err.to_string().contains("connect_timeout"), "{err}");
    for url in ["not a url", "http://127.0.0.1:6379"] {
        let err = RedisSync::start(sharing_index(1), RedisConfig::new(url)).unwrap_err();
        assert!(matches!(err, RedisSyncError::Url(_)), "{url}: {err:?}");
        assert!(err.to_string().starts_with("bad Redis URL: "), "{err}");
    }
}

/// src/replication/redis/mod.rs, `RedisConfig`: "Default `approx-kv-index:decisions`";
/// "`None` (the default)"; "Default 512"; "Default 100 ms"; "Default 1 s"; "Default
/// 10 ms"; "Default 1 s"; `RedisConfig::stream`: "The same, on stream `name`";
/// `RedisConfig::retention`: "The same, keeping `retention` of the stream".
#[test]
fn config_defaults_are_the_documented_ones() {
    let c = RedisConfig::new("redis://127.0.0.1:6379");
    assert_eq!(c.url, "redis://127.0.0.1:6379");
    assert_eq!(c.stream, "approx-kv-index:decisions");
    assert_eq!(c.retention, None);
    assert_eq!(c.batch, 512);
    assert_eq!(c.read_block, Duration::from_millis(100));
    assert_eq!(c.connect_timeout, Duration::from_secs(1));
    assert_eq!(c.backoff_min, Duration::from_millis(10));
    assert_eq!(c.backoff_max, Duration::from_secs(1));
    let c = c.stream("s").retention(Retention::MaxLen(7));
    assert_eq!(
        (c.stream.as_str(), c.retention, c.batch),
        ("s", Some(Retention::MaxLen(7)), 512)
    );
}

/// src/replication/redis/mod.rs, `RedisConfig::retention`: "`None` (the default): the
/// index's TTL, or 1,000,000 entries when its TTL means never"; `RedisConfig::stream`:
/// "Default `approx-kv-index:decisions`"; `Retention::Window`: "Entries younger than this
/// (by stream id, the server's milliseconds): the TTL".
#[test]
fn the_default_retention_is_the_index_ttl_or_a_length_when_it_never_expires() {
    // Nodes of 10 entries, so "~" trims exactly the nodes entirely older than the window.
    let Some(server) = RedisServer::start(&["--stream-node-max-entries", "10"]) else {
        return;
    };
    let mut conn = server.connection();
    let now_ms = UnixClock.now().as_millis() as u64;
    // 100 entries 700 s old and 100 entries 500 s old: around the 600 s TTL.
    let fill = |conn: &mut redis::Connection, stream: &str| {
        for (age_s, n) in [(700u64, 100), (500, 100)] {
            for i in 1..=n {
                redis::cmd("XADD")
                    .arg(stream)
                    .arg(format!("{}-{i}", now_ms - age_s * 1000))
                    .arg("x")
                    .arg("old")
                    .query::<String>(conn)
                    .unwrap();
            }
        }
    };
    let default_stream = "approx-kv-index:decisions";
    fill(&mut conn, default_stream);
    // A 600 s TTL (sharing_index), no retention, no stream: the defaults.
    let windowed = RedisSync::start(sharing_index(1), RedisConfig::new(server.url())).unwrap();
    windowed
        .index()
        .process_routing_decision_for_request(&prompt(1, 0), 1);
    assert!(eventually(|| windowed.stats().published == 1));
    // The 700 s old entries are gone; the 500 s old ones and the new one are kept.
    assert_eq!(xlen(&mut conn, default_stream), 101);
    windowed.shutdown();

    // A TTL that means never: trimmed by length (far above 201), not by time.
    fill(&mut conn, "never");
    let never = ApproxKvIndexer::builder()
        .block_size(4)
        .ttl(Duration::MAX)
        .replica_id(2)
        .share_decisions(64)
        .build()
        .unwrap();
    let config = RedisConfig::new(server.url()).stream("never");
    let never = RedisSync::start(Arc::new(never), config).unwrap();
    never
        .index()
        .process_routing_decision_for_request(&prompt(2, 0), 2);
    assert!(eventually(|| never.stats().published == 1));
    assert_eq!(xlen(&mut conn, "never"), 201);
}

/// src/replication/redis/mod.rs, module docs: "After a lost connection it reconnects with
/// exponential backoff and resumes after the last entry it read"; docs/design.md: "after a
/// failure it resumes from the last id it read". Reading the stream from its start again
/// would count every decision read before as a duplicate.
#[test]
fn after_a_lost_connection_the_subscriber_resumes_after_the_last_entry_it_read() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let (a, b) = (replica(&server, 1, "resume"), replica(&server, 2, "resume"));
    for n in 0..50 {
        a.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(eventually(|| b.stats().applied == 50));
    let mut conn = server.connection();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut conn)
        .unwrap();
    assert!(killed >= 3, "{killed}"); // a's two threads' and b's subscriber's connections
    assert!(eventually(|| b.stats().reconnects >= 1), "{:?}", b.stats());
    for n in 50..100 {
        a.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(
        eventually(|| (0..100).all(|n| holds(&b, 1, n)) && b.stats().applied == 100),
        "{:?}",
        b.stats()
    );
    let s = b.index().replication_stats();
    assert_eq!((s.duplicates, s.gaps), (0, 0), "{s:?}");
}

/// src/replication/redis/mod.rs, module docs: "decisions trimmed away meanwhile show as
/// [`gaps`](RedisSyncStats::gaps)"; `RedisSyncStats::gaps`: "Other replicas' decisions
/// never received (trimmed before this replica read them, or dropped at their origin)."
#[test]
fn decisions_trimmed_before_a_replica_read_them_count_as_gaps() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let b = replica(&server, 2, "trimmed");
    let mut conn = server.connection();
    let now = || UnixClock.now();
    xadd(&mut conn, "trimmed", &route(9, 1, now()));
    assert!(eventually(|| b.stats().applied == 1));
    // Decisions 2 to 5 added and all but the last trimmed at once: b never sees 2 to 4.
    let mut pipe = redis::pipe();
    pipe.atomic();
    for seq in 2..=5 {
        pipe.cmd("XADD")
            .arg("trimmed")
            .arg("*")
            .arg("d")
            .arg(route(9, seq, now()).encode())
            .ignore();
    }
    pipe.cmd("XTRIM")
        .arg("trimmed")
        .arg("MAXLEN")
        .arg(1)
        .ignore();
    pipe.query::<()>(&mut conn).unwrap();
    assert!(eventually(|| b.stats().applied == 2), "{:?}", b.stats());
    let s = b.stats();
    assert_eq!((s.gaps, s.rejected, s.expired), (3, 0, 0), "{s:?}");
    assert!(holds_route(&b, 5) && !holds_route(&b, 3));
}

/// src/replication/redis/mod.rs, `RedisSyncStats::expired`: "Other replicas' decisions
/// skipped as a TTL old on arrival."
#[test]
fn decisions_a_ttl_old_on_arrival_are_skipped_and_counted_as_expired() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let b = replica(&server, 2, "old"); // a 600 s TTL
    let mut conn = server.connection();
    let now = UnixClock.now();
    xadd(
        &mut conn,
        "old",
        &route(9, 1, now - Duration::from_secs(1_200)),
    );
    xadd(&mut conn, "old", &route(9, 2, now));
    assert!(
        eventually(|| b.stats().applied == 1 && b.stats().expired == 1),
        "{:?}",
        b.stats()
    );
    assert!(holds_route(&b, 2) && !holds_route(&b, 1));
    assert_eq!(b.stats().rejected, 0);
}

/// src/replication/redis/mod.rs, `RedisSync::start`: "Starts publishing `index`'s
/// decisions (if it shares them: ...) and applying the stream's."
#[test]
fn an_index_that_does_not_share_still_applies_the_streams_decisions() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let a = replica(&server, 1, "listener");
    let quiet = ApproxKvIndexer::builder()
        .block_size(4)
        .ttl(Duration::from_secs(600))
        .replica_id(3)
        .build()
        .unwrap();
    let config = RedisConfig::new(server.url()).stream("listener");
    let quiet = RedisSync::start(Arc::new(quiet), config).unwrap();
    quiet
        .index()
        .process_routing_decision_for_request(&prompt(3, 0), 3);
    for n in 0..20 {
        a.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(eventually(
        || (0..20).all(|n| holds(&quiet, 1, n)) && quiet.stats().applied == 20
    ));
    assert!(holds(&quiet, 3, 0)); // recorded locally
    assert!(eventually(|| a.stats().published == 20));
    let mut conn = server.connection();
    assert_eq!(xlen(&mut conn, "listener"), 20); // a's only
    assert_eq!((quiet.stats().published, a.stats().applied), (0, 0));
}

/// src/replication/redis/mod.rs, `RedisConfig::stream`: "The stream's key; one stream per
/// index (replicas of one index share it)."
#[test]
fn replicas_on_another_stream_see_nothing() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let (a, c) = (replica(&server, 1, "one"), replica(&server, 3, "one"));
    let b = replica(&server, 2, "two");
    for n in 0..10 {
        a.index()
            .process_routing_decision_for_request(&prompt(1, n), 1);
    }
    assert!(eventually(
        || c.stats().applied == 10 && a.stats().published == 10
    ));
    let mut conn = server.connection();
    assert_eq!((xlen(&mut conn, "one"), xlen(&mut conn, "two")), (10, 0));
    assert_eq!(b.stats().applied, 0);
    assert!(!holds(&b, 1, 0));
}

/// src/replication/redis/mod.rs, `RedisConfig::batch`: "Most decisions per pipelined
/// `XADD` batch and per `XREAD`." (the `XREAD` half: reading 30 retained entries 3 at a
/// time takes at least 10 reads).
#[test]
fn a_subscriber_reads_at_most_batch_entries_per_xread() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let mut conn = server.connection();
    let now = UnixClock.now();
    for seq in 1..=30 {
        xadd(&mut conn, "batched", &route(9, seq, now));
    }
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut conn)
        .unwrap();
    let mut config = RedisConfig::new(server.url()).stream("batched");
    config.batch = 3;
    config.read_block = Duration::from_secs(1);
    let b = RedisSync::start(sharing_index(2), config).unwrap();
    assert!(eventually(|| b.stats().applied == 30), "{:?}", b.stats());
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    let calls = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_xread:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no XREAD stats in {info}"));
    assert!(calls >= 10, "{calls} XREADs for 30 entries in batches of 3");
}

/// docs/design.md, Redis Streams transport: "Both reconnect with exponential backoff ...
/// and wait on a stop signal, so `shutdown`/drop joins them within about a `read_block`
/// plus a command timeout" — also in the middle of a long backoff pause.
#[test]
fn shutdown_cuts_a_long_backoff_short() {
    let Some(mut server) = RedisServer::start(&[]) else {
        return;
    };
    let url = server.url();
    server.kill(); // nothing listens there now
    let mut config = RedisConfig::new(url).stream("paused");
    config.backoff_min = Duration::from_secs(120);
    config.backoff_max = Duration::from_secs(120);
    let sync = RedisSync::start(sharing_index(1), config).unwrap();
    sync.index()
        .process_routing_decision_for_request(&prompt(1, 0), 1); // the publisher connects too
                                                                 // Both threads failed once and are now pausing for two minutes.
    assert!(
        eventually(|| sync.stats().reconnects >= 2),
        "{:?}",
        sync.stats()
    );
    let start = Instant::now();
    sync.shutdown();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// src/replication/redis/mod.rs, `RedisSync`: "[`shutdown`](Self::shutdown) or dropping
/// it stops and joins them all"; `RedisSync::shutdown`: "Stops and joins its threads
/// (within about `read_block` plus a command's timeout, and the reads queued for apply
/// threads). ... Decisions still in the outbox are not published."
#[test]
fn after_shutdown_nothing_is_connected_or_published() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let mut conn = server.connection();
    let a = replica(&server, 1, "stopped");
    a.index()
        .process_routing_decision_for_request(&prompt(1, 0), 1);
    assert!(eventually(|| a.stats().published == 1));
    assert!(eventually(|| clients(&mut conn) == 3)); // publisher, subscriber, this test
    let start = Instant::now();
    a.shutdown();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        eventually(|| clients(&mut conn) == 1),
        "{}",
        clients(&mut conn)
    );
    a.index()
        .process_routing_decision_for_request(&prompt(1, 1), 1);
    assert_eq!(a.index().outbox().unwrap().len(), 1); // stays queued
    assert_eq!(a.stats().published, 1);
    assert_eq!(xlen(&mut conn, "stopped"), 1);

    // Dropping does the same.
    let b = replica(&server, 2, "stopped");
    assert!(eventually(|| b.stats().applied == 1)); // its subscriber is connected
    drop(b);
    assert!(
        eventually(|| clients(&mut conn) == 1),
        "{}",
        clients(&mut conn)
    );
}
