//! Sharing decisions through a Redis stream (feature `redis`), on the `redis` crate's
//! synchronous API: two threads per index (and, if asked, more to apply with), no async
//! runtime.
//!
//! - The **publisher** drains the index's [`Outbox`](crate::replication::Outbox) and
//!   `XADD`s each decision's encoding (field `d`) to the stream, in pipelined batches,
//!   trimming it to the [`Retention`]: by time to the TTL window (`MINID ~`), or by length
//!   in capacity-only mode (`MAXLEN ~`). Capacities never expire: it shares them again
//!   ([`ApproxKvIndexer::reshare_capacities`]) every half window (and every half `MaxLen`
//!   of entries, at least once a minute; never twice within a second), so they stay in
//!   the stream.
//! - The **subscriber** first reads the whole retained window (a replica that joins late
//!   starts warm), then tails the stream with blocking `XREAD`s, applying the decisions
//!   of each read, in order, with [`ApproxKvIndexer::apply_decisions`] (with
//!   [`apply_threads`](RedisConfig::apply_threads) above 1, each origin's on a thread of
//!   its own among those: one origin's in order, several origins' at once). After a lost
//!   connection it reconnects with exponential backoff and resumes after the last entry it
//!   read; decisions trimmed away meanwhile show as [`gaps`](RedisSyncStats::gaps).
//!
//! Recording and finding never touch the network: while Redis is down they go on locally,
//! the outbox fills and then drops (counted), and memory stays bounded (the outbox and
//! one batch). When Redis is back, queued decisions are published and every replica reads
//! what it missed from the retained window.
//!
//! Stream entries are untrusted: an entry without field `d`, or whose value is not a
//! decision of this format version ([`Decision::decode`](crate::replication::Decision::decode)),
//! is skipped and counted in [`rejected`](RedisSyncStats::rejected).
//!
//! **Connections.** Any URL the `redis` crate takes: `redis://[:PASSWORD@]HOST:PORT[/DB]`
//! (or `redis://USER:PASSWORD@...` with ACLs). TLS, `rediss://[:PASSWORD@]HOST:PORT`, needs
//! the feature `redis-tls` (the `redis` crate's rustls backend with the `ring` provider):
//! the server is verified against the system's root certificates, or against a private CA
//! given with `RedisConfig::tls_root_cert`; `RedisConfig::tls_client_auth` adds a client
//! certificate for servers that require one (mutual TLS). Certificates are parsed by
//! [`RedisSync::start`]: a bad PEM is an error there. A replica that cannot verify the
//! server behaves as with the server down: it connects again and again (counted in
//! [`reconnects`](RedisSyncStats::reconnects)) and applies nothing, while recording and
//! finding go on locally.
//! With `redis-tls`, `start` installs rustls' `ring` provider as the process-wide default
//! when no default is installed (rustls could not choose if the application enabled
//! another provider too).
//!
//! ```no_run
//! use std::sync::Arc;
//! use approx_kv_index::{ApproxKvIndexer, Query};
//! use approx_kv_index::replication::redis::{RedisConfig, RedisSync};
//!
//! let index = Arc::new(ApproxKvIndexer::builder().share_decisions(65_536).build()?);
//! let sync = RedisSync::start(Arc::clone(&index), RedisConfig::new("redis://:secret@127.0.0.1:6379"))?;
//! index.record(3, Query::tokens(&[1; 64])).unwrap(); // also reaches the other replicas
//! println!("{:?}", sync.stats());
//! sync.shutdown(); // joins its threads (as dropping it does)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod appliers;
mod link;
mod publisher;
mod subscriber;
#[cfg(feature = "redis-tls")]
mod tls;

#[cfg(feature = "redis-tls")]
pub use tls::RedisTls;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use link::{Link, Stop};

use crate::core::NEVER;
use crate::{ApproxKvIndexer, WorkerKey};

/// The most [`RedisConfig::apply_threads`] a [`RedisSync`] starts.
pub const MAX_APPLY_THREADS: usize = 256;

/// The stream field holding a decision's encoding.
const FIELD: &str = "d";
/// Entries kept by default when the TTL means never.
const DEFAULT_MAX_LEN: usize = 1_000_000;

/// How much of the stream the publisher keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Entries younger than this (by stream id, the server's milliseconds): the TTL, so a
    /// late joiner reads every decision still live (capacities, which never expire, are
    /// shared again every half window).
    Window(Duration),
    /// About this many newest entries (for capacity-only mode, where decisions never
    /// expire).
    MaxLen(usize),
}

/// Settings of a [`RedisSync`]. Its `Debug` output hides the URL's password
/// ([`url_without_password`](Self::url_without_password)).
#[derive(Clone)]
pub struct RedisConfig {
    /// The server: `redis://[:PASSWORD@]HOST:PORT[/DB]`, or `rediss://...` for TLS
    /// (feature `redis-tls`).
    pub url: String,
    /// The stream's key; one stream per index (replicas of one index share it).
    /// Default `approx-kv-index:decisions`.
    pub stream: String,
    /// How much of the stream to keep; `None` (the default): the index's TTL, or 1,000,000
    /// entries when its TTL means never.
    pub retention: Option<Retention>,
    /// Most decisions per pipelined `XADD` batch and per `XREAD` (any size from 1; Redis
    /// reads at most 2^63 - 1 entries at once). Default 512.
    pub batch: usize,
    /// How long one `XREAD` blocks waiting for entries (a stop waits at most about this
    /// long for the subscriber); any duration (rounded to whole milliseconds, at least 1,
    /// at most 2^62). Default 100 ms.
    pub read_block: Duration,
    /// Timeout to connect, and to write a command; above zero. Default 1 s.
    pub connect_timeout: Duration,
    /// First pause after a failure; it doubles with each failure in a row (a stop ends
    /// any pause at once). Default 10 ms.
    pub backoff_min: Duration,
    /// Longest pause between attempts. Default 1 s.
    pub backoff_max: Duration,
    /// Threads applying the decisions read: the subscriber and `apply_threads - 1` more.
    /// Origin `o`'s decisions are always applied on thread `o % apply_threads`, in their
    /// order; different origins' at once. A replica receiving many replicas' decisions
    /// applies more of them per second with more threads, on a machine with the cores
    /// (`docs/benchmarks.md`). From 1 to [`MAX_APPLY_THREADS`]; default 1.
    pub apply_threads: usize,
    /// Certificates for a `rediss://` URL (feature `redis-tls`); none by default (the
    /// system's root certificates, no client certificate).
    #[cfg(feature = "redis-tls")]
    pub tls: RedisTls,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("RedisConfig");
        d.field("url", &self.url_without_password())
            .field("stream", &self.stream)
            .field("retention", &self.retention)
            .field("batch", &self.batch)
            .field("read_block", &self.read_block)
            .field("connect_timeout", &self.connect_timeout)
            .field("backoff_min", &self.backoff_min)
            .field("backoff_max", &self.backoff_max)
            .field("apply_threads", &self.apply_threads);
        #[cfg(feature = "redis-tls")]
        d.field("tls", &self.tls);
        d.finish()
    }
}

impl RedisConfig {
    /// The URL with its credentials (anything between `://` and the last `@`) shown as
    /// `***`, for logs and messages.
    ///
    /// ```
    /// use approx_kv_index::replication::redis::RedisConfig;
    /// let config = RedisConfig::new("rediss://:secret@10.0.0.7:6380/0");
    /// assert_eq!(config.url_without_password(), "rediss://***@10.0.0.7:6380/0");
    /// assert!(!format!("{config:?}").contains("secret"));
    /// assert_eq!(RedisConfig::new("redis://h:1").url_without_password(), "redis://h:1");
    /// ```
    pub fn url_without_password(&self) -> String {
        let url = self.url.as_str();
        match (url.find("://"), url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}***{}", &url[..scheme + 3], &url[at..])
            }
            _ => url.to_string(),
        }
    }

    /// The defaults, for the server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            stream: "approx-kv-index:decisions".into(),
            retention: None,
            batch: 512,
            read_block: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            apply_threads: 1,
            #[cfg(feature = "redis-tls")]
            tls: RedisTls::default(),
        }
    }

    /// The same, on stream `name`.
    pub fn stream(mut self, name: impl Into<String>) -> Self {
        self.stream = name.into();
        self
    }

    /// The same, applying on `threads` threads ([`apply_threads`](Self::apply_threads)).
    ///
    /// ```
    /// use approx_kv_index::replication::redis::RedisConfig;
    /// assert_eq!(RedisConfig::new("redis://127.0.0.1:6379").apply_threads(4).apply_threads, 4);
    /// ```
    pub fn apply_threads(mut self, threads: usize) -> Self {
        self.apply_threads = threads;
        self
    }

    /// The same, keeping `retention` of the stream.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// The same, trusting the root certificate(s) in `pem` (a private CA) instead of the
    /// system's, for a `rediss://` URL (feature `redis-tls`).
    #[cfg(feature = "redis-tls")]
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_cert = Some(pem.into());
        self
    }

    /// The same, presenting the client certificate chain `cert_pem` with its private key
    /// `key_pem` to a server that authenticates clients (mutual TLS; feature `redis-tls`).
    #[cfg(feature = "redis-tls")]
    pub fn tls_client_auth(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_auth = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// A client for the configured server, with its TLS settings (feature `redis-tls`).
    fn client(&self) -> Result<redis::Client, RedisSyncError> {
        #[cfg(not(feature = "redis-tls"))]
        return redis::Client::open(self.url.as_str()).map_err(RedisSyncError::Url);
        #[cfg(feature = "redis-tls")]
        tls::client(&self.url, &self.tls)
    }

    /// Deletes the configured stream on the server (`DEL`), with every decision it retains:
    /// for a test or a tool that starts its replicas from an empty stream. Connects once,
    /// waiting at most `connect_timeout` for the server, as the transport's threads would
    /// (same URL, password and TLS settings).
    ///
    /// ```no_run
    /// use approx_kv_index::replication::redis::RedisConfig;
    /// RedisConfig::new("redis://127.0.0.1:6379").stream("my-run").delete_stream()?;
    /// # Ok::<(), approx_kv_index::replication::redis::RedisSyncError>(())
    /// ```
    pub fn delete_stream(&self) -> Result<(), RedisSyncError> {
        let mut conn = self
            .client()?
            .get_connection_with_timeout(self.connect_timeout)
            .map_err(RedisSyncError::Server)?;
        conn.set_read_timeout(Some(self.connect_timeout))
            .and_then(|()| conn.set_write_timeout(Some(self.connect_timeout)))
            .map_err(RedisSyncError::Server)?;
        redis::cmd("DEL")
            .arg(&self.stream)
            .query::<()>(&mut conn)
            .map_err(RedisSyncError::Server)
    }
}

/// Counters of a [`RedisSync`] and of its index's sharing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisSyncStats {
    /// Decisions of this replica added to the stream.
    pub published: u64,
    /// Decisions of this replica dropped because the outbox was full (Redis down or slow).
    pub dropped: u64,
    /// Other replicas' decisions applied.
    pub applied: u64,
    /// Stream entries skipped: not a decision this build reads (another format version,
    /// altered bytes, or not a decision at all).
    pub rejected: u64,
    /// Other replicas' decisions skipped as a TTL old on arrival.
    pub expired: u64,
    /// Other replicas' decisions never received (trimmed before this replica read them,
    /// or dropped at their origin).
    pub gaps: u64,
    /// Other replicas seen restarting with their id
    /// ([`ReplicationStats::restarts`](crate::replication::ReplicationStats::restarts)).
    pub restarts: u64,
    /// Other replicas' decisions about a worker taken before its removal, or capacities
    /// set before a newer one, skipped (counted in `applied`;
    /// [`ReplicationStats::superseded`](crate::replication::ReplicationStats::superseded)).
    pub superseded: u64,
    /// Connections lost or refused, by either thread.
    pub reconnects: u64,
    /// Median of now - decision time at apply, over the decisions applied.
    pub lag_p50: Duration,
    /// 99th percentile of the same.
    pub lag_p99: Duration,
}

/// Why a [`RedisSync`] could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisSyncError {
    /// The URL is not one the `redis` crate takes.
    Url(redis::RedisError),
    /// A setting is out of its range: a zero `batch` or `connect_timeout`, `apply_threads`
    /// not from 1 to [`MAX_APPLY_THREADS`].
    Config(&'static str),
    /// A thread could not be spawned.
    Spawn(std::io::Error),
    /// The server could not be reached, or refused a command
    /// ([`RedisConfig::delete_stream`]; the transport itself retries instead).
    Server(redis::RedisError),
    /// The TLS settings are unusable: a PEM that holds no certificate or key or does not
    /// parse, a key that does not match its certificate, certificates with a URL that is not
    /// `rediss://` (feature `redis-tls`).
    #[cfg(feature = "redis-tls")]
    Tls(String),
}

impl std::fmt::Display for RedisSyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url(e) => write!(f, "bad Redis URL: {e}"),
            Self::Config(what) => write!(f, "bad Redis sync setting: {what}"),
            Self::Spawn(e) => write!(f, "cannot spawn a Redis sync thread: {e}"),
            Self::Server(e) => write!(f, "Redis server: {e}"),
            #[cfg(feature = "redis-tls")]
            Self::Tls(e) => write!(f, "bad Redis TLS setting: {e}"),
        }
    }
}

impl std::error::Error for RedisSyncError {}

/// What one of a [`RedisSync`]'s threads runs.
type ThreadBody = Box<dyn FnOnce() + Send>;

/// An index's connection to the shared stream: a publisher and a subscriber thread, and
/// [`apply_threads`](RedisConfig::apply_threads)` - 1` applier threads.
/// [`shutdown`](Self::shutdown) or dropping it stops and joins them all.
pub struct RedisSync<W: WorkerKey = crate::WorkerId> {
    index: Arc<ApproxKvIndexer<W>>,
    stop: Arc<Stop>,
    threads: parking_lot::Mutex<Vec<JoinHandle<()>>>,
    published: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
}

impl<W: WorkerKey> std::fmt::Debug for RedisSync<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSync")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<W: WorkerKey> RedisSync<W> {
    /// Starts publishing `index`'s decisions (if it shares them:
    /// [`Builder::share_decisions`](crate::Builder::share_decisions)) and applying the
    /// stream's. Connecting happens on the threads, so this succeeds while the server is
    /// down; they connect when it is up. Errors: a URL the `redis` crate does not take,
    /// a zero `batch` or `connect_timeout`, `apply_threads` not from 1 to
    /// [`MAX_APPLY_THREADS`], TLS settings that do not parse (`RedisSyncError::Tls`,
    /// feature `redis-tls`), a thread that could not be spawned.
    pub fn start(
        index: Arc<ApproxKvIndexer<W>>,
        mut config: RedisConfig,
    ) -> Result<Self, RedisSyncError> {
        if config.batch == 0 {
            return Err(RedisSyncError::Config("batch must be at least 1"));
        }
        if !(1..=MAX_APPLY_THREADS).contains(&config.apply_threads) {
            return Err(RedisSyncError::Config(
                "apply_threads must be from 1 to MAX_APPLY_THREADS",
            ));
        }
        if config.connect_timeout.is_zero() {
            // The socket refuses a zero timeout: the threads would never connect.
            return Err(RedisSyncError::Config("connect_timeout must be above zero"));
        }
        let client = config.client()?;
        let ttl = index.ttl_nanos();
        config.retention.get_or_insert(if ttl >= NEVER {
            Retention::MaxLen(DEFAULT_MAX_LEN)
        } else {
            Retention::Window(Duration::from_nanos(ttl))
        });
        let sync = Self {
            index,
            stop: Arc::default(),
            threads: Default::default(),
            published: Arc::default(),
            rejected: Arc::default(),
            reconnects: Arc::default(),
        };
        let read_timeout = config.read_block.saturating_add(config.connect_timeout);
        let link = |timeout| Link::new(client.clone(), &config, timeout, sync.reconnects.clone());
        let publisher = {
            let (index, config, link) = (
                sync.index.clone(),
                config.clone(),
                link(config.connect_timeout),
            );
            let (stop, published) = (sync.stop.clone(), sync.published.clone());
            move || publisher::run(index, config, link, stop, published)
        };
        let (appliers, applier_ends) = appliers::appliers(config.apply_threads);
        let subscriber = {
            let (index, link, stop) = (sync.index.clone(), link(read_timeout), sync.stop.clone());
            let counters = subscriber::Counters {
                rejected: sync.rejected.clone(),
            };
            move || subscriber::run(index, config, link, stop, counters, appliers)
        };
        // The appliers first: each ends once the subscriber is gone (with its queues).
        let mut threads: Vec<(&str, ThreadBody)> = applier_ends
            .into_iter()
            .map(|end| {
                let index = sync.index.clone();
                let body: ThreadBody = Box::new(move || end.run(index));
                ("approx-kv-apply", body)
            })
            .collect();
        threads.push(("approx-kv-publish", Box::new(publisher)));
        threads.push(("approx-kv-subscribe", Box::new(subscriber)));
        for (name, body) in threads {
            let thread = std::thread::Builder::new().name(name.into()).spawn(body);
            sync.threads
                .lock()
                .push(thread.map_err(RedisSyncError::Spawn)?);
        }
        Ok(sync)
    }

    /// The index this syncs.
    pub fn index(&self) -> &Arc<ApproxKvIndexer<W>> {
        &self.index
    }

    /// Counters: published, dropped, applied, rejected, reconnects, apply lag.
    pub fn stats(&self) -> RedisSyncStats {
        let r = self.index.replication_stats();
        RedisSyncStats {
            published: self.published.load(Relaxed),
            dropped: r.dropped,
            applied: r.applied,
            rejected: self.rejected.load(Relaxed),
            expired: r.expired,
            gaps: r.gaps,
            restarts: r.restarts,
            superseded: r.superseded,
            reconnects: self.reconnects.load(Relaxed),
            lag_p50: r.lag_p50,
            lag_p99: r.lag_p99,
        }
    }

    /// Stops and joins its threads (within about `read_block` plus a command's timeout,
    /// and the reads queued for apply threads). Idempotent. Decisions still in the outbox
    /// are not published.
    pub fn shutdown(&self) {
        self.stop.stop();
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }
}

impl<W: WorkerKey> Drop for RedisSync<W> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
