//! `Deployment::raw` behind Sentinels: the username and password in `rediss://` Sentinel URLs
//! reach the Sentinels, and plain `redis://` Sentinels work when TLS files are given too (they
//! apply to `rediss://` deployments only). Real Sentinel groups, one primary each.

use distlock::redis::DEFAULT_COMMAND_TIMEOUT;
use distlock_examples::{DemoTls, Deployment, RawConnection};
use lock_testkit::{SentinelGroup, ServerError, ServerOptions, TestCerts};

fn tls_files(certs: &TestCerts) -> DemoTls {
    DemoTls::from_files(
        Some(certs.ca_path().into()),
        Some(certs.client_cert_path().into()),
        Some(certs.client_key_path().into()),
    )
    .expect("read the TLS files")
}

/// A value written and read back through `raw`, on the service's primary.
async fn round_trip(raw: &mut RawConnection, key: &str) -> String {
    let () = raw
        .query(redis::cmd("SET").arg(key).arg("through the primary"))
        .await
        .expect("SET");
    raw.query(redis::cmd("GET").arg(key)).await.expect("GET")
}

#[tokio::test]
async fn credentials_in_tls_sentinel_urls_reach_the_sentinels() {
    let certs = TestCerts::generate().expect("certificates");
    let group = match SentinelGroup::start_with(0, ServerOptions::new().tls(&certs, true)) {
        Ok(group) => group,
        Err(ServerError::TlsUnsupported { binary, .. }) => {
            eprintln!("skipped: {} has no TLS support", binary.display());
            return;
        }
        Err(error) => panic!("start a Sentinel group on TLS: {error}"),
    };
    // From now on every Sentinel answers only its own user.
    let mut urls = Vec::new();
    for index in 0..3 {
        let sentinel = group.sentinel(index);
        let mut con = sentinel.client().get_connection().expect("connect");
        redis::cmd("ACL")
            .arg(&["SETUSER", "watcher", "on", ">s3cret", "+@all"])
            .exec(&mut con)
            .expect("ACL SETUSER watcher");
        redis::cmd("ACL")
            .arg(&["SETUSER", "default", "off"])
            .exec(&mut con)
            .expect("ACL SETUSER default off");
        urls.push(format!(
            "rediss://watcher:s3cret@127.0.0.1:{}/",
            sentinel.port()
        ));
    }
    let tls = tls_files(&certs);
    let deployment = Deployment::Sentinel {
        sentinels: urls,
        service: group.service().into(),
    };
    let mut raw = deployment
        .raw(&tls, DEFAULT_COMMAND_TIMEOUT)
        .await
        .expect("a connection through Sentinels that want a username and password");
    assert_eq!(
        round_trip(&mut raw, "demo:tls").await,
        "through the primary"
    );

    // Without them the Sentinels refuse: the credentials are what made the difference.
    let anonymous = Deployment::Sentinel {
        sentinels: (0..3)
            .map(|index| format!("rediss://127.0.0.1:{}/", group.sentinel(index).port()))
            .collect(),
        service: group.service().into(),
    };
    assert!(anonymous.raw(&tls, DEFAULT_COMMAND_TIMEOUT).await.is_err());
}

#[tokio::test]
async fn plain_sentinels_work_with_tls_files_given() {
    let certs = TestCerts::generate().expect("certificates");
    let group = SentinelGroup::start(0).expect("start a Sentinel group");
    let deployment = Deployment::Sentinel {
        sentinels: group.sentinel_urls(),
        service: group.service().into(),
    };
    let mut raw = deployment
        .raw(&tls_files(&certs), DEFAULT_COMMAND_TIMEOUT)
        .await
        .expect("a connection through plain Sentinels");
    assert_eq!(
        round_trip(&mut raw, "demo:plain").await,
        "through the primary"
    );
}
