//! A private `redis-server` for one test: a free loopback port, a temporary directory, no
//! persistence; killed (and its directory removed) when the guard drops, so nothing is
//! left running. Shared by the Redis tests and the Redis benchmark.
//!
//! Without the binary the tests skip with a message saying how to install it, unless
//! `APPROX_KV_REQUIRE_REDIS=1` (set by `.ci/run`), which makes them fail instead.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

const BINARY: &str = "redis-server";
const HOW: &str = "install it (Debian/Ubuntu: `apt-get install redis-server`; macOS: \
                   `brew install redis`) and rerun; set APPROX_KV_REQUIRE_REDIS=1 to fail \
                   instead of skipping";

impl RedisServer {
    /// Starts a server with `extra` arguments (e.g. `["--requirepass", "pw"]`); `None`
    /// (after saying why) when `redis-server` is missing and not required.
    pub fn start(extra: &[&str]) -> Option<Self> {
        if Command::new(BINARY).arg("--version").output().is_err() {
            if std::env::var_os("APPROX_KV_REQUIRE_REDIS").is_some_and(|v| v != "0") {
                panic!("{BINARY} not found and APPROX_KV_REQUIRE_REDIS is set: {HOW}");
            }
            eprintln!("skipping: {BINARY} not found: {HOW}");
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
        };
        server.spawn();
        Some(server)
    }

    /// `redis://[:PASSWORD@]127.0.0.1:PORT`, with the password given to `start`.
    pub fn url(&self) -> String {
        let password = self
            .extra
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| self.extra.get(i + 1));
        match password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    fn spawn(&mut self) {
        let child = Command::new(BINARY)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let client = redis::Client::open(self.url()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
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

    /// A connection for the test's own commands.
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
