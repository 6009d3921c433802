//! A private `redis-server` for one test: a free loopback port, a temporary directory, no
//! persistence; killed (and its directory removed) when the guard drops, so nothing is
//! left running. Shared by the Redis tests and the Redis benchmark.
//!
//! Without the binary the tests skip with a message saying how to install it, unless
//! `APPROX_KV_REQUIRE_REDIS=1` (set by `.ci/run`), which makes them fail instead.
//!
//! [`RedisServer::start_tls`] starts one that listens only for TLS (`rediss://`), with the
//! certificates of a directory (`certs.rs`).
#![allow(dead_code)]

#[cfg(feature = "redis-tls")]
pub mod certs;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// For a TLS server: the directory of `ca.crt`, `server.crt` and `server.key`.
    tls: Option<PathBuf>,
}

const BINARY: &str = "redis-server";
const HOW: &str = "install it (Debian/Ubuntu: `apt-get install redis-server`; macOS: \
                   `brew install redis`) and rerun; set APPROX_KV_REQUIRE_REDIS=1 to fail \
                   instead of skipping";

impl RedisServer {
    /// Starts a server with `extra` arguments (e.g. `["--requirepass", "pw"]`); `None`
    /// (after saying why) when `redis-server` is missing and not required.
    pub fn start(extra: &[&str]) -> Option<Self> {
        Self::start_with(extra, None)
    }

    /// Starts a server that listens only for TLS, on `port`, with `certs`' `ca.crt`,
    /// `server.crt` and `server.key` and without client certificates (`extra` may say
    /// `--tls-auth-clients yes`); `None` as for `start`.
    pub fn start_tls(certs: &Path, extra: &[&str]) -> Option<Self> {
        Self::start_with(extra, Some(certs.to_path_buf()))
    }

    /// Whether `redis-server` runs; when it does not, panics if `APPROX_KV_REQUIRE_REDIS`
    /// is set, else says how to install it.
    pub fn available() -> bool {
        if Command::new(BINARY).arg("--version").output().is_ok() {
            return true;
        }
        if required() {
            panic!("{BINARY} not found and APPROX_KV_REQUIRE_REDIS is set: {HOW}");
        }
        eprintln!("skipping: {BINARY} not found: {HOW}");
        false
    }

    fn start_with(extra: &[&str], tls: Option<PathBuf>) -> Option<Self> {
        if !Self::available() {
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("approx-kv-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut server = Self {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls,
        };
        server.spawn();
        Some(server)
    }

    /// `redis://[:PASSWORD@]127.0.0.1:PORT` (`rediss://` for TLS), with the password
    /// given to `start`.
    pub fn url(&self) -> String {
        let password = self
            .extra
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| self.extra.get(i + 1));
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match password {
            Some(pw) => format!("{scheme}://:{pw}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    fn spawn(&mut self) {
        let mut command = Command::new(BINARY);
        match &self.tls {
            None => command.args(["--port", &self.port.to_string()]),
            Some(certs) => command
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(certs.join("server.crt"))
                .arg("--tls-key-file")
                .arg(certs.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(certs.join("ca.crt"))
                .args(["--tls-auth-clients", "no"]),
        };
        let child = command
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        if self.tls.is_some() {
            // A TLS client needs the test's certificates: listening is the sign of ready.
            while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                self.exited();
                assert!(Instant::now() < deadline, "redis-server did not listen");
                std::thread::sleep(Duration::from_millis(10)); // polling another process
            }
            return;
        }
        let client = redis::Client::open(self.url()).unwrap();
        loop {
            let pong = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if pong.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(10)); // polling another process
        }
    }

    /// Panics if the server exited (a bad argument, a port taken).
    fn exited(&mut self) {
        let child = self.child.as_mut().expect("a started server");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("redis-server exited: {status}");
        }
    }

    /// Kills the server (SIGKILL) and waits for it to exit; its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A connection for the test's own commands (not for a TLS server).
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How long a test waits for an outcome before it fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A replica's index: block size 4, a 600 s TTL, sharing its decisions as replica `id`.
pub fn sharing_index(id: u64) -> std::sync::Arc<approx_kv_index::ApproxKvIndexer> {
    let index = approx_kv_index::ApproxKvIndexer::builder()
        .block_size(4)
        .ttl(Duration::from_secs(600))
        .replica_id(id)
        .share_decisions(65_536)
        .build()
        .unwrap();
    std::sync::Arc::new(index)
}

/// A prompt of two blocks, distinct per (replica, n).
pub fn prompt(replica: u64, n: u32) -> Vec<u32> {
    let base = (replica as u32) << 20 | n << 3;
    (base..base + 8).collect()
}

/// Whether `sync`'s index finds both blocks of `prompt(replica, n)` on worker `replica`.
pub fn holds(sync: &approx_kv_index::replication::redis::RedisSync, replica: u64, n: u32) -> bool {
    let found = sync.index().find_matches_for_request(&prompt(replica, n));
    found.scores.get(&replica) == Some(&2)
}

/// Polls `ok` until it holds or the deadline passes; returns whether it held.
pub fn eventually(mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5)); // polling other threads
    }
    ok()
}

/// Whether `APPROX_KV_REQUIRE_REDIS` asks to fail rather than skip.
pub fn required() -> bool {
    std::env::var_os("APPROX_KV_REQUIRE_REDIS").is_some_and(|v| v != "0")
}
