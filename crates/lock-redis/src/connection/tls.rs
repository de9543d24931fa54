//! TLS for every connection of a backend (`rediss://` URLs): which certificate authorities to
//! trust, a client certificate for mutual TLS, and the rustls crypto provider.
//!
//! redis-rs does the TLS itself; this module checks the settings before any I/O and hands them
//! to it in each deployment's own way: a client of one server (`Client::build_with_tls`, whose
//! connection info then carries the certificates to every connection made from it: commands,
//! notifications, the Sentinel switch listener), the nodes a cluster client finds through its
//! seeds (`ClusterClientBuilder::certs`), and the data nodes a Sentinel names
//! (`SentinelClientBuilder::set_client_to_redis_certificates`: `SentinelClient::build` has no
//! way to pass them).
//!
//! The crypto provider: redis-rs builds its rustls configuration with
//! `rustls::ClientConfig::builder()`, which takes the process-wide default provider and panics
//! when none is installed and rustls cannot pick one by itself (no provider compiled in, or both
//! ring and aws-lc-rs). The `tls-rustls` feature brings ring and installs it as the process
//! default before the first connection, unless the application installed a provider already
//! (then that one is used: `install_default` refuses to replace it, which is fine).

use std::fmt;

use lock_core::{Error, Result};

/// The TLS settings as given to the builder, not yet checked.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// Certificate authorities (PEM) to trust instead of the webpki roots.
    ca_pem: Option<Vec<u8>>,
    /// A client certificate chain and its private key (PEM), for mutual TLS.
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Never prints a certificate or a key, only what is set.
impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<set>"))
            .field("identity", &self.identity.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl TlsSettings {
    /// Trust the certificate authorities in `pem`.
    pub(crate) fn set_ca_pem(&mut self, pem: Vec<u8>) {
        self.ca_pem = Some(pem);
    }

    /// Present this certificate chain and key when the server asks for one.
    pub(crate) fn set_identity(&mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) {
        self.identity = Some((cert_pem, key_pem));
    }

    /// Checks the settings (before any I/O) and installs the crypto provider.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`]: a CA bundle without a certificate or with a broken one, a
    /// client certificate without its key or with a key that is not its own, or any TLS setting
    /// without the `tls-rustls` feature.
    pub(crate) fn check(&self) -> Result<Tls> {
        #[cfg(feature = "tls-rustls")]
        {
            // The provider is installed when a TLS client is opened (`Tls::open`): a backend on
            // `redis://` URLs leaves the application's choice of provider alone.
            rustls_checks::check(self.ca_pem.as_deref(), self.identity.as_ref())?;
            let certs = (self.ca_pem.is_some() || self.identity.is_some()).then(|| {
                redis::TlsCertificates {
                    client_tls: self
                        .identity
                        .as_ref()
                        .map(|(cert, key)| redis::ClientTlsConfig {
                            client_cert: cert.clone(),
                            client_key: key.clone(),
                        }),
                    root_cert: self.ca_pem.clone(),
                }
            });
            Ok(Tls { certs })
        }
        #[cfg(not(feature = "tls-rustls"))]
        {
            if self.ca_pem.is_some() || self.identity.is_some() {
                return Err(invalid(
                    "TLS settings (a CA bundle or a client certificate) need the `tls-rustls` \
                     feature of lock-redis (or distlock)",
                ));
            }
            Ok(Tls {})
        }
    }
}

/// Checked TLS settings: how to open clients with them.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// The CA bundle and client certificate for redis-rs, when any was given.
    #[cfg(feature = "tls-rustls")]
    certs: Option<redis::TlsCertificates>,
}

impl Tls {
    /// A client of the server at `url`, with the TLS settings when there are any.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a bad URL (`rediss://` without the `tls-rustls` feature
    /// included), or TLS settings on a `redis://` URL.
    pub(crate) fn open(&self, url: &str) -> Result<redis::Client> {
        let client = redis::Client::open(url).map_err(|error| Error::InvalidConfig {
            reason: format!("bad Redis URL: {error}"),
        })?;
        self.open_info(client.get_connection_info().clone())
    }

    /// A client of the server described by `info` (a URL parsed, or the application's own
    /// `redis::Client` / `ConnectionInfo`), keeping all of its settings (address, database,
    /// credentials, protocol, TCP settings, TLS), with the builder's TLS settings added when
    /// there are any and `info` has none of its own.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a TLS address without the `tls-rustls` feature, a TLS
    /// address that checks no certificate (`insecure`), TLS settings on a plain address, or TLS
    /// settings while `info` carries certificates of its own (`Client::build_with_tls`): which
    /// of the two should win would be a guess.
    pub(crate) fn open_info(&self, info: redis::ConnectionInfo) -> Result<redis::Client> {
        if let redis::ConnectionAddr::TcpTls { insecure, .. } = info.addr() {
            // redis-rs may have TLS through another crate's features: without ours there is no
            // crypto provider, and the first connect would panic.
            if cfg!(not(feature = "tls-rustls")) {
                return Err(invalid(
                    "`rediss://` URLs need the `tls-rustls` feature of lock-redis (or distlock)",
                ));
            }
            // Certificates unchecked would also drop the CA bundle and client identity given
            // here (redis-rs sets none in that mode).
            if *insecure {
                return Err(invalid(
                    "`#insecure` (no certificate check) is not supported: give the server's CA \
                     with `tls_ca_pem`",
                ));
            }
            #[cfg(feature = "tls-rustls")]
            install_crypto_provider();
        }
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.certs {
            return match info.addr() {
                redis::ConnectionAddr::TcpTls { .. } if has_own_certificates(&info) => {
                    Err(invalid(format!(
                        "the connection info of {} carries TLS certificates of its own \
                         (`redis::Client::build_with_tls`) and `tls_ca_pem` or \
                         `tls_client_identity` is set too: give the certificates one way",
                        info.addr()
                    )))
                }
                redis::ConnectionAddr::TcpTls { .. } => {
                    redis::Client::build_with_tls(info, certs.clone()).map_err(|error| {
                        Error::InvalidConfig {
                            reason: format!("bad TLS settings: {error}"),
                        }
                    })
                }
                addr => Err(invalid(format!(
                    "TLS settings are given, but {addr} is not reached over TLS (a `rediss://` \
                     URL or a `ConnectionAddr::TcpTls`)"
                ))),
            };
        }
        // Never fails: a `ConnectionInfo` is already what `open` would make.
        redis::Client::open(info).map_err(|error| Error::InvalidConfig {
            reason: format!("bad connection info: {error}"),
        })
    }

    /// `builder` with the certificates for the nodes a cluster client finds through its seeds
    /// (the seeds' own come from their clients, see [`Tls::open`]).
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
    ) -> redis::cluster::ClusterClientBuilder {
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.certs {
            return builder.certs(certs.clone());
        }
        builder
    }

    /// The client of a Sentinel service when its Sentinels (`sentinels`, opened with
    /// [`Tls::open`]) are reached over TLS: the data nodes then are too, with the same
    /// certificates. `None` when the Sentinels are reached in plain TCP.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the Sentinels' URLs mix `redis://` and `rediss://`, or
    /// (over TLS) carry different credentials: redis-rs's `SentinelClientBuilder`, the only
    /// way to give the data nodes certificates, takes one set for all the Sentinels.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel_client(
        &self,
        sentinels: &[redis::ConnectionInfo],
        service: &str,
        node_auth: Option<&(Option<String>, String)>,
    ) -> Result<Option<redis::sentinel::SentinelClient>> {
        let secure = sentinels
            .iter()
            .filter(|info| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }))
            .count();
        if secure == 0 {
            return Ok(None);
        }
        if secure != sentinels.len() {
            return Err(invalid(
                "the Sentinel URLs mix `redis://` and `rediss://`: give all of them one scheme",
            ));
        }
        #[cfg(not(feature = "tls-rustls"))]
        {
            // Not reached: without the feature redis-rs refuses `rediss://` URLs.
            let _ = (service, node_auth);
            Err(invalid(
                "`rediss://` Sentinels need the `tls-rustls` feature",
            ))
        }
        #[cfg(feature = "tls-rustls")]
        {
            use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
            let first = sentinels[0].redis_settings();
            if sentinels.iter().any(|info| {
                let settings = info.redis_settings();
                settings.username() != first.username() || settings.password() != first.password()
            }) {
                return Err(invalid(
                    "over TLS every Sentinel URL must carry the same username and password",
                ));
            }
            // The Sentinels' addresses carry their certificates already (`Tls::open`).
            let mut builder = SentinelClientBuilder::new(
                sentinels.iter().map(|info| info.addr().clone()),
                service,
                SentinelServerType::Master,
            )
            .map_err(|error| invalid(format!("bad Sentinel settings: {error}")))?
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(username) = first.username() {
                builder = builder.set_client_to_sentinel_username(username);
            }
            if let Some(password) = first.password() {
                builder = builder.set_client_to_sentinel_password(password);
            }
            if let Some((username, password)) = node_auth {
                builder = builder.set_client_to_redis_password(password);
                if let Some(username) = username {
                    builder = builder.set_client_to_redis_username(username);
                }
            }
            if let Some(certs) = &self.certs {
                builder = builder.set_client_to_redis_certificates(certs.clone());
            }
            builder
                .build()
                .map(Some)
                .map_err(|error| invalid(format!("bad Sentinel settings: {error}")))
        }
    }
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        reason: reason.into(),
    }
}

/// Whether `info` carries TLS certificates of its own (made with `Client::build_with_tls`).
/// redis-rs hands them only to connections made from that very info: the nodes a cluster
/// client discovers and the data nodes a Sentinel names get the builder's certificates
/// (`ClusterClientBuilder::certs`, `set_client_to_redis_certificates`), never these.
#[cfg(any(feature = "tls-rustls", feature = "cluster", feature = "sentinel"))]
pub(crate) fn has_own_certificates(info: &redis::ConnectionInfo) -> bool {
    matches!(
        info.addr(),
        redis::ConnectionAddr::TcpTls {
            tls_params: Some(_),
            ..
        }
    )
}

/// Installs ring as the process's default rustls crypto provider, once. When the application
/// installed one first, `install_default` returns it as an error and changes nothing: redis-rs
/// then uses the application's choice.
#[cfg(feature = "tls-rustls")]
pub(crate) fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The checks redis-rs would otherwise make only when connecting, with ring directly (not the
/// process default, so checking installs nothing).
#[cfg(feature = "tls-rustls")]
mod rustls_checks {
    use std::sync::Arc;

    use lock_core::Result;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use super::invalid;

    /// Parses the CA bundle and the client identity as redis-rs will, and checks that the key
    /// is the certificate's own.
    pub(super) fn check(
        ca_pem: Option<&[u8]>,
        identity: Option<&(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = ca_pem {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert
                    .map_err(|error| invalid(format!("the TLS CA bundle is not PEM: {error}")))?;
                roots.add(cert).map_err(|error| {
                    invalid(format!(
                        "the TLS CA bundle holds a bad certificate: {error}"
                    ))
                })?;
            }
            if roots.is_empty() {
                return Err(invalid(
                    "the TLS CA bundle holds no `CERTIFICATE` block: every server would be refused",
                ));
            }
        }
        let Some((cert_pem, key_pem)) = identity else {
            return Ok(());
        };
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|error| invalid(format!("the TLS client certificate is not PEM: {error}")))?;
        if chain.is_empty() {
            return Err(invalid(
                "the TLS client certificate PEM holds no `CERTIFICATE` block",
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|error| {
            invalid(format!(
                "the TLS client key PEM holds no private key (PKCS#8, PKCS#1 or SEC1): {error}"
            ))
        })?;
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| invalid(format!("TLS: {error}")))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|error| {
            invalid(format!(
                "the TLS client certificate and key do not go together: {error}"
            ))
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason of an `InvalidConfig`, or a panic with what came instead.
    fn refusal<T>(result: Result<T>) -> String {
        match result {
            Err(Error::InvalidConfig { reason }) => reason,
            Err(other) => panic!("expected InvalidConfig, got {other:?}"),
            Ok(_) => panic!("expected InvalidConfig, got Ok"),
        }
    }

    fn with_ca(pem: &[u8]) -> TlsSettings {
        let mut settings = TlsSettings::default();
        settings.set_ca_pem(pem.to_vec());
        settings
    }

    fn with_identity(cert: &[u8], key: &[u8]) -> TlsSettings {
        let mut settings = TlsSettings::default();
        settings.set_identity(cert.to_vec(), key.to_vec());
        settings
    }

    #[test]
    fn no_settings_open_plain_clients() {
        let tls = TlsSettings::default().check().expect("nothing to check");
        let client = tls.open("redis://127.0.0.1:1/").expect("plain URL");
        assert!(matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::Tcp(..)
        ));
        assert!(refusal(tls.open("http://127.0.0.1/")).contains("bad Redis URL"));
    }

    #[cfg(not(feature = "tls-rustls"))]
    #[test]
    fn tls_settings_need_the_feature() {
        let certs = lock_testkit::TestCerts::generate().expect("certs");
        for settings in [
            with_ca(certs.ca_pem()),
            with_identity(certs.client_cert_pem(), certs.client_key_pem()),
        ] {
            assert!(refusal(settings.check()).contains("`tls-rustls`"));
        }
    }

    #[cfg(feature = "tls-rustls")]
    mod rustls_settings {
        use super::*;
        use lock_testkit::TestCerts;

        #[test]
        fn installs_a_crypto_provider() {
            install_crypto_provider();
            assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        }

        #[test]
        fn a_ca_bundle_must_hold_good_certificates() {
            let no_block = refusal(with_ca(b"not a certificate").check());
            assert!(no_block.contains("no `CERTIFICATE` block"), "{no_block}");
            let not_base64 = refusal(
                with_ca(b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n").check(),
            );
            assert!(not_base64.contains("not PEM"), "{not_base64}");
            let not_a_certificate = refusal(
                with_ca(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").check(),
            );
            assert!(
                not_a_certificate.contains("bad certificate"),
                "{not_a_certificate}"
            );
            let certs = TestCerts::generate().expect("certs");
            with_ca(certs.ca_pem()).check().expect("a good bundle");
        }

        #[test]
        fn a_client_certificate_needs_its_own_key() {
            let certs = TestCerts::generate().expect("certs");
            let other = TestCerts::generate().expect("other certs");
            let cert = certs.client_cert_pem();
            for key in [&b""[..], cert] {
                let reason = refusal(with_identity(cert, key).check());
                assert!(reason.contains("no private key"), "{reason}");
            }
            let reason = refusal(with_identity(b"", certs.client_key_pem()).check());
            assert!(reason.contains("no `CERTIFICATE` block"), "{reason}");
            let reason = refusal(with_identity(cert, other.client_key_pem()).check());
            assert!(reason.contains("do not go together"), "{reason}");
            with_identity(cert, certs.client_key_pem())
                .check()
                .expect("a certificate with its key");
        }

        #[test]
        fn tls_settings_need_rediss_urls_and_reach_the_client() {
            let certs = TestCerts::generate().expect("certs");
            let tls = with_ca(certs.ca_pem()).check().expect("settings");
            let reason = refusal(tls.open("redis://:secret@127.0.0.1:6379/"));
            assert!(
                reason.contains("127.0.0.1:6379") && reason.contains("`rediss://`"),
                "{reason}"
            );
            assert!(
                !reason.contains("secret"),
                "no password in errors: {reason}"
            );
            let client = tls.open("rediss://127.0.0.1:6379/").expect("TLS URL");
            assert!(matches!(
                client.get_connection_info().addr(),
                redis::ConnectionAddr::TcpTls {
                    tls_params: Some(_),
                    ..
                }
            ));
        }

        #[test]
        fn debug_shows_no_key() {
            let certs = TestCerts::generate().expect("certs");
            let settings = with_identity(certs.client_cert_pem(), certs.client_key_pem());
            let shown = format!("{settings:?}");
            assert!(!shown.contains("BEGIN"), "{shown}");
        }

        #[cfg(feature = "sentinel")]
        #[test]
        fn sentinels_share_one_scheme_and_credentials_over_tls() {
            let certs = TestCerts::generate().expect("certs");
            let tls = with_ca(certs.ca_pem()).check().expect("settings");
            let plain = Tls::default();
            let info =
                |tls: &Tls, url: &str| tls.open(url).expect("URL").get_connection_info().clone();
            assert!(
                plain
                    .sentinel_client(&[info(&plain, "redis://127.0.0.1:1/")], "s", None)
                    .expect("plain")
                    .is_none(),
                "plain Sentinels keep redis-rs's plain client"
            );
            let mixed = [
                info(&plain, "rediss://127.0.0.1:1/"),
                info(&plain, "redis://127.0.0.1:2/"),
            ];
            assert!(refusal(plain.sentinel_client(&mixed, "s", None)).contains("mix"));
            let credentials = [
                info(&tls, "rediss://:a@127.0.0.1:1/"),
                info(&tls, "rediss://:b@127.0.0.1:2/"),
            ];
            assert!(
                refusal(tls.sentinel_client(&credentials, "s", None))
                    .contains("same username and password")
            );
            let secure = [
                info(&tls, "rediss://:a@127.0.0.1:1/"),
                info(&tls, "rediss://:a@127.0.0.1:2/"),
            ];
            assert!(
                tls.sentinel_client(&secure, "s", Some(&(None, "p".into())))
                    .expect("TLS Sentinels")
                    .is_some()
            );
        }
    }
}
