//! Throwaway TLS certificates for the Redis TLS tests, made by the `openssl` CLI in a
//! temporary directory (shared by `tests/redis_tls.rs` and the replay tool's CLI tests).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{required, RedisServer};

const OPENSSL_HOW: &str = "install it (Debian/Ubuntu: `apt-get install openssl`) and rerun; \
                           set APPROX_KV_REQUIRE_REDIS=1 to fail instead of skipping";

/// A directory of throwaway certificates, removed when dropped: `ca.crt`/`ca.key` (a
/// self-signed CA), `server.crt`/`server.key` (127.0.0.1 and localhost, signed by the CA),
/// `client.crt`/`client.key` (a client certificate signed by the CA), and
/// `other-ca.crt`/`other-ca.key` (a second CA that signed nothing here).
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// The certificates, or `None` (after saying why) when `redis-server` or `openssl` is
    /// missing and `APPROX_KV_REQUIRE_REDIS` is not set.
    pub fn make() -> Option<Self> {
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

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
