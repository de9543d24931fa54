//! What every lock-postgres test binary shares: one real PostgreSQL server per binary, with the
//! schema installed once, and backends on it.

#![allow(dead_code)] // Each binary uses its own part of it.

use std::sync::Arc;
use std::time::Duration;

use lock_postgres::PostgresBackend;
use lock_testkit::conformance::Harness;
use lock_testkit::{PostgresServer, SharedFixture};

static SERVER: SharedFixture<PostgresServer> = SharedFixture::new();

/// The binary's server, with the schema installed once.
pub fn server() -> Arc<PostgresServer> {
    SERVER.get_or_start(|| {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = server.url();
        // The cases run inside a runtime; the installation gets one of its own.
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(async {
                    let config = url.parse().expect("the server's URL");
                    lock_postgres::install_schema(&config).await
                })
        })
        .join()
        .expect("the installing thread")
        .expect("install the schema");
        server
    })
}

/// A harness for the conformance suites: each client is a backend of its own on the shared
/// server, listening for notifications or (`poll`) polling at that interval.
pub struct Postgres {
    pub server: Arc<PostgresServer>,
    /// `Some`: waiters poll at this interval instead of listening.
    pub poll: Option<Duration>,
}

impl Postgres {
    /// Backends whose waiters are woken by `NOTIFY`.
    pub fn listening() -> Self {
        Postgres {
            server: server(),
            poll: None,
        }
    }

    /// Backends whose waiters poll every 50 ms.
    pub fn polling() -> Self {
        Postgres {
            server: server(),
            poll: Some(Duration::from_millis(50)),
        }
    }

    /// A new backend (a client of its own) on the server.
    pub async fn backend(&self) -> PostgresBackend {
        let mut builder = PostgresBackend::builder(&self.server.url()).expect("the server's URL");
        if let Some(interval) = self.poll {
            builder = builder.listen(false).poll_interval(interval);
        }
        builder.connect().await.expect("connect to the test server")
    }
}

impl Harness for Postgres {
    type Backend = PostgresBackend;

    async fn client(&self) -> PostgresBackend {
        self.backend().await
    }
}
