//! TLS settings of the transport (feature `redis-tls`): the `redis` crate's rustls backend,
//! given a private root certificate and, for mutual TLS, a client certificate and key.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

use super::RedisSyncError;

/// TLS settings for a `rediss://` URL (feature `redis-tls`), in PEM. With neither set, a
/// `rediss://` server is verified against the system's root certificates.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// Root certificate(s) to trust instead of the system's: a private CA. One or more
    /// `CERTIFICATE` PEM sections.
    pub root_cert: Option<Vec<u8>>,
    /// Client certificate chain and its private key (PKCS#8, PKCS#1 or SEC1), for a server
    /// that authenticates its clients (`tls-auth-clients yes`).
    pub client_auth: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisTls {
    fn is_empty(&self) -> bool {
        self.root_cert.is_none() && self.client_auth.is_none()
    }
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key; the certificates only by size.
        let root = self
            .root_cert
            .as_ref()
            .map(|pem| format!("{} bytes of PEM", pem.len()));
        let client = self
            .client_auth
            .as_ref()
            .map(|_| "certificate and key (redacted)");
        f.debug_struct("RedisTls")
            .field("root_cert", &root)
            .field("client_auth", &client)
            .finish()
    }
}

/// The client for `url` with `tls`: certificates are parsed here, so a bad PEM is an error
/// of `start`, not a failure of every connection later.
pub(super) fn client(url: &str, tls: &RedisTls) -> Result<redis::Client, RedisSyncError> {
    use redis::IntoConnectionInfo;
    // rustls needs a process-wide crypto provider when the application enables more than
    // one (it picks the only one otherwise): install ring's unless one is already set.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    if tls.is_empty() {
        return redis::Client::open(url).map_err(RedisSyncError::Url);
    }
    let info = url.into_connection_info().map_err(RedisSyncError::Url)?;
    if !matches!(info.addr, redis::ConnectionAddr::TcpTls { .. }) {
        return Err(tls_error("TLS certificates need a rediss:// URL"));
    }
    // The redis crate skips text outside PEM sections (so garbage would trust nothing) and
    // parses a client key only when connecting: check both here.
    let roots = match &tls.root_cert {
        Some(pem) => {
            let mut store = RootCertStore::empty();
            for cert in certificates(pem, "root certificate")? {
                store
                    .add(cert)
                    .map_err(|e| tls_error(format!("root certificate: {e}")))?;
            }
            store
        }
        None => RootCertStore::empty(),
    };
    if let Some((chain, key)) = &tls.client_auth {
        let chain = certificates(chain, "client certificate")?;
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| tls_error(format!("client key: {e}")))?;
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls_error(format!("client certificate and key: {e}")))?;
    }
    let certificates = redis::TlsCertificates {
        client_tls: tls
            .client_auth
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.root_cert.clone(),
    };
    redis::Client::build_with_tls(info, certificates).map_err(|e| tls_error(e.to_string()))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, RedisSyncError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(tls_error(format!("{what}: no PEM CERTIFICATE section")));
    }
    Ok(certs)
}

fn tls_error(message: impl Into<String>) -> RedisSyncError {
    RedisSyncError::Tls(message.into())
}
