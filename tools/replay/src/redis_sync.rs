//! Replicas synced through a real Redis server (`--sync redis://HOST:PORT`, feature
//! `redis`): one [`RedisSync`] per replica on a stream of the run's own, deleted at the
//! end of the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use approx_kv_index::replication::redis::{RedisConfig, RedisSync};
use approx_kv_index::ApproxKvIndexer;

/// The transports of a run's replicas; dropping it stops them and deletes the stream.
pub struct Synced {
    syncs: Vec<RedisSync>,
    url: String,
    stream: String,
}

/// Starts one transport per index on stream `approx-kv-replay:PID:TAG`, emptied first.
pub fn start(indexes: &[Arc<ApproxKvIndexer>], url: &str, tag: &str) -> Result<Synced, String> {
    let stream = format!("approx-kv-replay:{}:{tag}", std::process::id());
    delete(url, &stream)?;
    let syncs = indexes
        .iter()
        .map(|index| {
            RedisSync::start(Arc::clone(index), RedisConfig::new(url).stream(&stream))
                .map_err(|e| format!("cannot sync through {url}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Synced {
        syncs,
        url: url.into(),
        stream,
    })
}

impl Drop for Synced {
    fn drop(&mut self) {
        for sync in &self.syncs {
            sync.shutdown();
        }
        let _ = delete(&self.url, &self.stream);
    }
}

fn delete(url: &str, stream: &str) -> Result<(), String> {
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .map_err(|e| format!("cannot reach Redis at {url}: {e}"))?;
    redis::cmd("DEL")
        .arg(stream)
        .query::<()>(&mut conn)
        .map_err(|e| format!("cannot reset the stream {stream}: {e}"))
}

/// Waits (at most `limit`) until each index has received every decision the others
/// shared. Polls: the transports run on their own threads.
pub fn wait_applied(indexes: &[Arc<ApproxKvIndexer>], limit: Duration) {
    let stats: Vec<_> = indexes.iter().map(|i| i.replication_stats()).collect();
    let total: u64 = stats.iter().map(|s| s.shared).sum();
    let deadline = Instant::now() + limit;
    for (index, mut s) in indexes.iter().zip(stats) {
        let want = total - s.shared;
        while s.applied + s.expired + s.duplicates + s.gaps < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(50)); // polling the subscriber thread
            s = index.replication_stats();
        }
    }
}

/// Published, applied, rejected, lag over all replicas.
pub fn note(synced: &Synced) -> String {
    let stats: Vec<_> = synced.syncs.iter().map(RedisSync::stats).collect();
    let sum = |f: fn(&approx_kv_index::replication::redis::RedisSyncStats) -> u64| {
        stats.iter().map(f).sum::<u64>()
    };
    let worst = |f: fn(&approx_kv_index::replication::redis::RedisSyncStats) -> Duration| {
        stats.iter().map(f).max().unwrap_or_default()
    };
    format!(
        "redis: {} decisions published, {} applied, {} dropped, {} rejected, {} reconnects; \
         apply lag (wall clock) p50 {:.2} ms, p99 {:.2} ms (worst replica)",
        sum(|s| s.published),
        sum(|s| s.applied),
        sum(|s| s.dropped),
        sum(|s| s.rejected),
        sum(|s| s.reconnects),
        worst(|s| s.lag_p50).as_secs_f64() * 1e3,
        worst(|s| s.lag_p99).as_secs_f64() * 1e3,
    )
}
