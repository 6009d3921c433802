//! The Redis transport over TLS (feature `redis-tls`) against a real `redis-server` that
//! listens only for TLS, with a throwaway CA and certificates made by the `openssl` CLI in
//! a temporary directory per test (`redis_server/certs.rs`): `cargo test --features redis-tls --test redis_tls`.
//! Without `redis-server` or `openssl` these skip, unless `APPROX_KV_REQUIRE_REDIS=1`.
//!
//! Waits poll for an outcome with a generous deadline (30 s), as in `redis_sync.rs`.
#![cfg(feature = "redis-tls")]

#[path = "support/redis_server/mod.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use approx_kv_index::replication::redis::{RedisConfig, RedisSync, RedisSyncError};
use redis_server::certs::Certs;
use redis_server::{eventually, holds, prompt, sharing_index, RedisServer};

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
    // The stream deleted over the same verified, password-protected connection.
    let exists = || -> bool {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(certs.read("ca.crt")),
        };
        let client = redis::Client::build_with_tls(server.url(), certificates).unwrap();
        let mut conn = client.get_connection().unwrap();
        redis::cmd("EXISTS").arg("tls").query(&mut conn).unwrap()
    };
    assert!(exists());
    config().stream("tls").delete_stream().unwrap();
    assert!(!exists());
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
