//! The Redis transport over TLS (feature `redis-tls`) against a real `redis-server` that
//! listens only for TLS, with a throwaway CA and certificates made by the `openssl` CLI in
//! a temporary directory per test: `cargo test --features redis-tls --test redis_tls`.
//! Without `redis-server` or `openssl` these skip, unless `APPROX_KV_REQUIRE_REDIS=1`.
//!
//! Waits poll for an outcome with a generous deadline (30 s), as in `redis_sync.rs`.
#![cfg(feature = "redis-tls")]

mod redis_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use approx_kv_index::replication::redis::{RedisConfig, RedisSync, RedisSyncError};
use redis_server::{eventually, holds, prompt, required, sharing_index, RedisServer};

const OPENSSL_HOW: &str = "install it (Debian/Ubuntu: `apt-get install openssl`) and rerun; \
                           set APPROX_KV_REQUIRE_REDIS=1 to fail instead of skipping";

/// A directory of throwaway certificates, removed when dropped: `ca.crt`/`ca.key` (a
/// self-signed CA), `server.crt`/`server.key` (127.0.0.1 and localhost, signed by the CA),
/// `client.crt`/`client.key` (a client certificate signed by the CA), and
/// `other-ca.crt`/`other-ca.key` (a second CA that signed nothing here).
struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// The certificates, or `None` (after saying why) when `redis-server` or `openssl` is
    /// missing and `APPROX_KV_REQUIRE_REDIS` is not set.
    fn make() -> Option<Self> {
        if !RedisServer::available() {
            return None;
        }
        if Command::new("openssl").arg("version").output().is_err() {
            if required() {
                panic!("openssl not found and APPROX_KV_REQUIRE_REDIS is set: {OPENSSL_HOW}");
            }
            eprintln!("skipping: openssl not found: {OPENSSL_HOW}");
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "approx-kv-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let certs = Self { dir };
        // Own configuration files, so nothing depends on the system's openssl.cnf.
        for (name, cn) in [
            ("ca", "approx-kv-index test CA"),
            ("other-ca", "approx-kv-index other CA"),
            ("server", "localhost"),
            ("client", "approx-kv-index replica"),
        ] {
            let cnf = format!(
                "[req]\nprompt = no\ndistinguished_name = dn\nx509_extensions = ca\n\
                 [dn]\nCN = {cn}\n\
                 [ca]\nbasicConstraints = critical, CA:TRUE\n\
                 keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n\
                 [server]\nbasicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature\n\
                 extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost\n\
                 [client]\nbasicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature\n\
                 extendedKeyUsage = clientAuth\n"
            );
            std::fs::write(certs.path(&format!("{name}.cnf")), cnf).unwrap();
        }
        let p256 = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            certs.openssl(
                &["req", "-x509", "-config", &format!("{ca}.cnf")],
                &p256,
                &[
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                    "-days",
                    "2",
                ],
            );
        }
        for (serial, leaf) in [("2", "server"), ("3", "client")] {
            certs.openssl(
                &["req", "-new", "-config", &format!("{leaf}.cnf")],
                &p256,
                &[
                    "-keyout",
                    &format!("{leaf}.key"),
                    "-out",
                    &format!("{leaf}.csr"),
                ],
            );
            certs.openssl(
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{leaf}.csr"),
                    "-CA",
                    "ca.crt",
                ],
                &["-CAkey", "ca.key", "-set_serial", serial, "-days", "2"],
                &[
                    "-extfile",
                    &format!("{leaf}.cnf"),
                    "-extensions",
                    leaf,
                    "-out",
                    &format!("{leaf}.crt"),
                ],
            );
        }
        Some(certs)
    }

    fn openssl(&self, a: &[&str], b: &[&str], c: &[&str]) {
        let out = Command::new("openssl")
            .args(a)
            .args(b)
            .args(c)
            .current_dir(&self.dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {a:?} {b:?} {c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A replica on `stream` with `config`'s URL and TLS settings.
fn replica(id: u64, config: RedisConfig, stream: &str) -> RedisSync {
    RedisSync::start(sharing_index(id), config.stream(stream)).unwrap()
}

/// Each of `replicas` (replica id = position) records `each` prompts routed to itself.
fn record(replicas: &[&RedisSync], ids: &[u64], each: u32) {
    for n in 0..each {
        for (r, &id) in replicas.iter().zip(ids) {
            r.index()
                .process_routing_decision_for_request(&prompt(id, n), id);
        }
    }
}

#[test]
fn replicas_share_decisions_over_tls_with_a_private_ca_and_a_password() {
    let Some(certs) = Certs::make() else {
        return;
    };
    let server = RedisServer::start_tls(certs.dir(), &["--requirepass", "s3cret"]).unwrap();
    assert!(server.url().starts_with("rediss://:s3cret@127.0.0.1:"));
    let config = || RedisConfig::new(server.url()).tls_root_cert(certs.read("ca.crt"));
    let (a, b) = (replica(0, config(), "tls"), replica(1, config(), "tls"));
    const EACH: u32 = 200;
    record(&[&a, &b], &[0, 1], EACH);
    for r in [&a, &b] {
        assert!(
            // Counters move after the work they count (a batch is counted once the server
            // answered, after a peer may have applied it): wait for them too.
            eventually(|| (0..2).all(|id| (0..EACH).all(|n| holds(r, id, n)))
                && (r.stats().published, r.stats().applied) == (u64::from(EACH), u64::from(EACH))),
            "{:?}",
            r.stats()
        );
        let s = r.stats();
        assert_eq!((s.published, s.applied), (u64::from(EACH), u64::from(EACH)));
        assert_eq!(
            (s.rejected, s.dropped, s.gaps, s.expired, s.reconnects),
            (0, 0, 0, 0, 0)
        );
    }
    // The wrong password over a verified TLS connection: refused, nothing applied.
    let url = server.url().replace("s3cret", "wrong");
    let c = replica(
        2,
        RedisConfig::new(url).tls_root_cert(certs.read("ca.crt")),
        "tls",
    );
    assert!(eventually(|| c.stats().reconnects >= 2), "{:?}", c.stats());
    assert_eq!(c.stats().applied, 0);
}

#[test]
fn a_replica_that_does_not_trust_the_server_applies_nothing_and_works_locally() {
    let Some(certs) = Certs::make() else {
        return;
    };
    let server = RedisServer::start_tls(certs.dir(), &[]).unwrap();
    let trusted = || RedisConfig::new(server.url()).tls_root_cert(certs.read("ca.crt"));
    let (a, b) = (
        replica(0, trusted(), "untrusted"),
        replica(1, trusted(), "untrusted"),
    );
    let untrusted = [
        // The system's root certificates, which do not hold the test CA.
        replica(2, RedisConfig::new(server.url()), "untrusted"),
        // Another private CA.
        replica(
            3,
            RedisConfig::new(server.url()).tls_root_cert(certs.read("other-ca.crt")),
            "untrusted",
        ),
    ];
    const EACH: u32 = 100;
    let start = Instant::now();
    record(&[&a, &b, &untrusted[0], &untrusted[1]], &[0, 1, 2, 3], EACH);
    let slowest_call = start.elapsed();
    // The trusted replicas share theirs (so the server works) ...
    for r in [&a, &b] {
        // The applied count moves after the blocks appear: wait for both.
        assert!(
            eventually(|| (0..2).all(|id| (0..EACH).all(|n| holds(r, id, n)))
                && r.stats().applied == u64::from(EACH)),
            "{:?}",
            r.stats()
        );
    }
    for (r, id) in untrusted.iter().zip([2, 3]) {
        // ... the untrusted ones fail every handshake, counted, and apply nothing ...
        assert!(eventually(|| r.stats().reconnects >= 4), "{:?}", r.stats());
        let s = r.stats();
        assert_eq!((s.published, s.applied, s.rejected), (0, 0, 0), "{s:?}");
        assert!((0..EACH).all(|n| !holds(r, 0, n) && !holds(r, 1, n)));
        // ... while recording and finding go on locally.
        assert!((0..EACH).all(|n| holds(r, id, n)));
        r.index()
            .process_routing_decision_for_request(&prompt(id, EACH), id);
        assert!(holds(r, id, EACH));
        assert_eq!(r.stats().dropped, 0); // queued (outbox and one batch), not lost
    }
    // Nor did the trusted replicas get anything of theirs.
    assert!((0..EACH).all(|n| !holds(&a, 2, n) && !holds(&b, 3, n)));
    assert!(slowest_call < Duration::from_secs(1), "{slowest_call:?}");
    let start = Instant::now();
    drop(untrusted); // joins their threads, though every connection fails
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn mutual_tls_a_client_certificate_is_required_and_accepted() {
    let Some(certs) = Certs::make() else {
        return;
    };
    let server = RedisServer::start_tls(certs.dir(), &["--tls-auth-clients", "yes"]).unwrap();
    let with_cert = || {
        RedisConfig::new(server.url())
            .tls_root_cert(certs.read("ca.crt"))
            .tls_client_auth(certs.read("client.crt"), certs.read("client.key"))
    };
    let (a, b) = (
        replica(0, with_cert(), "mtls"),
        replica(1, with_cert(), "mtls"),
    );
    let without = replica(
        2,
        RedisConfig::new(server.url()).tls_root_cert(certs.read("ca.crt")),
        "mtls",
    );
    record(&[&a, &b], &[0, 1], 50);
    for r in [&a, &b] {
        assert!(eventually(
            || (0..2).all(|id| (0..50).all(|n| holds(r, id, n)))
        ));
    }
    assert!(eventually(|| without.stats().reconnects >= 2));
    assert_eq!(without.stats().applied, 0, "{:?}", without.stats());
    // A key that is not the certificate's: an error of `start`.
    let mismatched = RedisConfig::new(server.url())
        .tls_root_cert(certs.read("ca.crt"))
        .tls_client_auth(certs.read("client.crt"), certs.read("server.key"));
    let err = RedisSync::start(sharing_index(3), mismatched).unwrap_err();
    assert!(matches!(err, RedisSyncError::Tls(_)), "{err}");
}

#[test]
fn bad_certificates_are_errors_of_start() {
    // Needs no server: certificates are parsed when starting.
    let url = "rediss://127.0.0.1:1";
    let bad_der = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let bad_base64 = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
    let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let configs = [
        RedisConfig::new(url).tls_root_cert(&b"not a certificate"[..]),
        RedisConfig::new(url).tls_root_cert(Vec::new()),
        RedisConfig::new(url).tls_root_cert(&bad_der[..]),
        RedisConfig::new(url).tls_root_cert(&bad_base64[..]),
        RedisConfig::new(url).tls_client_auth(&b"garbage"[..], &key[..]),
        RedisConfig::new(url).tls_client_auth(&bad_der[..], &b"no key"[..]),
        // Certificates with a URL that is not TLS.
        RedisConfig::new("redis://127.0.0.1:1").tls_root_cert(&bad_der[..]),
    ];
    for config in configs {
        let tls = format!("{:?}", config.tls);
        match RedisSync::start(sharing_index(1), config) {
            Err(RedisSyncError::Tls(e)) => eprintln!("{tls}: {e}"),
            other => panic!("{tls}: {other:?}"),
        }
    }
    // The key never shows in a config's Debug.
    let config = RedisConfig::new(url).tls_client_auth(&bad_der[..], &b"SECRET KEY"[..]);
    assert!(!format!("{config:?}").contains("SECRET"));
    // A rediss:// URL without certificates trusts the system's roots: it starts.
    RedisSync::start(sharing_index(1), RedisConfig::new(url))
        .unwrap()
        .shutdown();
}
