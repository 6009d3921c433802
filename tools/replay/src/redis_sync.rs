//! Replicas synced through a real Redis server (`--sync redis://HOST:PORT`, feature
//! `redis`; `rediss://` with `--sync-tls-ca`, feature `redis-tls`): one [`RedisSync`] per
//! replica on a stream of the run's own, deleted at the end of the run.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use approx_kv_index::replication::redis::{RedisConfig, RedisSync};
use approx_kv_index::ApproxKvIndexer;

/// The transports of a run's replicas; dropping it stops them and deletes the stream.
pub struct Synced {
    syncs: Vec<RedisSync>,
    /// Boxed: a run's router holds this, and the config is large.
    config: Box<RedisConfig>,
}

/// Starts one transport per index on stream `approx-kv-replay:PID:TAG`, emptied first,
/// verifying a `rediss://` server against the root certificates in `tls_ca` if given
/// (feature `redis-tls`).
pub fn start(
    indexes: &[Arc<ApproxKvIndexer>],
    url: &str,
    tls_ca: Option<&Path>,
    tag: &str,
) -> Result<Synced, String> {
    let stream = format!("approx-kv-replay:{}:{tag}", std::process::id());
    let config = with_ca(RedisConfig::new(url).stream(stream), tls_ca)?;
    let shown = config.url_without_password();
    config
        .delete_stream()
        .map_err(|e| format!("cannot reset the stream at {shown}: {e}"))?;
    let syncs = indexes
        .iter()
        .map(|index| {
            RedisSync::start(Arc::clone(index), config.clone())
                .map_err(|e| format!("cannot sync through {shown}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Synced {
        syncs,
        config: Box::new(config),
    })
}

/// Whether the server at `url` can be reached (and verified, with `tls_ca`): deletes a
/// probe stream of this run's own, which does not exist.
pub fn check(url: &str, tls_ca: Option<&Path>) -> Result<(), String> {
    let stream = format!("approx-kv-replay:{}:probe", std::process::id());
    let config = with_ca(RedisConfig::new(url).stream(stream), tls_ca)?;
    let shown = config.url_without_password();
    config
        .delete_stream()
        .map_err(|e| format!("cannot reach the --sync server at {shown}: {e}"))
}

/// `config`, trusting the private CA in the PEM file `tls_ca` if one is given.
#[cfg(feature = "redis-tls")]
fn with_ca(config: RedisConfig, tls_ca: Option<&Path>) -> Result<RedisConfig, String> {
    let Some(path) = tls_ca else {
        return Ok(config);
    };
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read --sync-tls-ca {}: {e}", path.display()))?;
    Ok(config.tls_root_cert(pem))
}

/// Without TLS support, a CA is an error that says how to get it.
#[cfg(not(feature = "redis-tls"))]
fn with_ca(config: RedisConfig, tls_ca: Option<&Path>) -> Result<RedisConfig, String> {
    match tls_ca {
        None => Ok(config),
        Some(_) => Err(
            "--sync-tls-ca: this build has no TLS support; build with `--features redis-tls`"
                .into(),
        ),
    }
}

impl Drop for Synced {
    fn drop(&mut self) {
        for sync in &self.syncs {
            sync.shutdown();
        }
        let _ = self.config.delete_stream();
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn messages_hide_the_password() {
        use approx_kv_index::replication::redis::RedisConfig;
        let shown = |url: &str| RedisConfig::new(url).url_without_password();
        assert_eq!(
            shown("rediss://:pw@127.0.0.1:6379"),
            "rediss://***@127.0.0.1:6379"
        );
        assert_eq!(shown("redis://user:p@ss@h:1/0"), "redis://***@h:1/0");
        assert_eq!(shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
